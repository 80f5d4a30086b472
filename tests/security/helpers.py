"""An appliance alone on a SASL_PLAINTEXT listener, with PLAIN users in its JAAS key and a
SCRAM user added by `klog users add` before it first starts (as an operator would)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import FAST_GROUPS, REPO, Appliance, free_ports

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
SCRAM_USER, SCRAM_PASSWORD = "scrammy", "scram pass, with = signs"
MECHANISMS = "PLAIN,SCRAM-SHA-512,SCRAM-SHA-256"


def plain_jaas(users: dict[str, str]) -> str:
    entries = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="admin" password="admin-secret" {entries};')


def sasl_appliance(workdir: Path, *, log_dirs: int = 1, **settings) -> Appliance:
    """Configured and with its SCRAM user, not started."""
    port = free_ports(log_dirs)
    appliance = Appliance(workdir, log_dirs=log_dirs, port=port, settings={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "sasl.enabled.mechanisms": MECHANISMS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS),
        **FAST_GROUPS, **settings})
    secret = workdir / "scram-password"
    secret.write_text(SCRAM_PASSWORD + "\n")
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        subprocess.run([sys.executable, "-m", "klog_cli.main", "users", "add", SCRAM_USER,
                        "--mechanism", mechanism, "--password-file", str(secret),
                        "--config", str(appliance.config)],
                       cwd=REPO, check=True, capture_output=True, timeout=60)
    return appliance


def confluent_conf(bootstrap: str, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def python_conf(bootstrap: str, mechanism: str, user: str, password: str) -> dict:
    """kafka-python's and aiokafka's names (the same)."""
    return {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}


CREDENTIALS = {"PLAIN": ("alice", PLAIN_USERS["alice"]),
               "SCRAM-SHA-512": (SCRAM_USER, SCRAM_PASSWORD),
               "SCRAM-SHA-256": (SCRAM_USER, SCRAM_PASSWORD)}
