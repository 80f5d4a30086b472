"""Certificates for the TLS tests, made with the `openssl` command line: a CA, a server
certificate for 127.0.0.1 and localhost, client certificates. No Python dependency."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY_PASSWORD = "keystore-secret"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Certs:
    directory: Path
    ca: Path  # the CA certificate (PEM): clients' ssl_cafile, the broker's truststore
    server_keystore: Path  # Kafka's PEM keystore: encrypted key + certificate chain
    server_cert: Path
    server_key: Path  # unencrypted
    client_cert: Path
    client_key: Path
    client_subject: str  # as RFC 2253 (Kafka's principal name)

    def serial_of(self, cert: Path) -> int:
        out = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-serial"],
                             check=True, capture_output=True, text=True).stdout
        return int(out.strip().split("=", 1)[1], 16)


def _signed(directory: Path, name: str, subject: str, *, serial: int,
            san: str | None = None, client: bool = False) -> tuple[Path, Path]:
    key, csr, cert = (directory / f"{name}.key", directory / f"{name}.csr",
                      directory / f"{name}.pem")
    openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key.name,
            "-subj", subject, "-out", csr.name, cwd=directory)
    ext = directory / f"{name}.ext"
    lines = ["basicConstraints=CA:FALSE",
             f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}"]
    if san:
        lines.append(f"subjectAltName={san}")
    ext.write_text("\n".join(lines) + "\n")
    openssl("x509", "-req", "-in", csr.name, "-CA", "ca.pem", "-CAkey", "ca.key",
            "-set_serial", str(serial), "-days", "2", "-sha256", "-extfile", ext.name,
            "-out", cert.name, cwd=directory)
    return key, cert


def server_keystore(directory: Path, name: str, *, serial: int, password: str = KEY_PASSWORD,
                    san: str = "IP:127.0.0.1,DNS:localhost") -> tuple[Path, Path]:
    """A new server certificate signed by the CA in `directory` for the names in `san`, and
    its PEM keystore (the key encrypted with `password`): (keystore, certificate)."""
    common_name = san.split(",")[-1].split(":", 1)[1]
    key, cert = _signed(directory, name, f"/CN={common_name}/O=klog tests", serial=serial,
                        san=san)
    encrypted = directory / f"{name}.enc.key"
    openssl("pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", key.name, "-out", encrypted.name,
            "-passout", f"pass:{password}", cwd=directory)
    keystore = directory / f"{name}.keystore.pem"
    keystore.write_text(encrypted.read_text() + cert.read_text())
    return keystore, cert


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-subj", "/CN=klog test CA", "-days", "2", "-out", "ca.pem", cwd=directory)
    keystore, cert = server_keystore(directory, "server", serial=1001)
    client_key, client_cert = _signed(directory, "client",
                                      "/C=US/O=Example, Inc./OU=eng/CN=alice", serial=2001,
                                      client=True)
    return Certs(directory, directory / "ca.pem", keystore, cert, directory / "server.key",
                 client_cert, client_key, "CN=alice,OU=eng,O=Example\\, Inc.,C=US")
