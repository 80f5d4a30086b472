"""The principal of a TLS connection, as Kafka's DefaultKafkaPrincipalBuilder names it.

With the default `ssl.principal.mapping.rules` Kafka's principal is `User:` followed by Java's
`X500Principal.getName()` of the client certificate's subject: the RFC 2253 string, most
specific RDN first (`CN=client,OU=eng,O=Example,C=US`), the keywords CN, C, L, ST, O, OU,
STREET, DC and UID, other attributes as their OID with the DER value in hex (done here for
emailAddress, the common one). Without a client certificate the principal is `User:ANONYMOUS`.

Pure functions of `SSLObject.getpeercert()`'s dict: tested without a socket.
"""

from __future__ import annotations

ANONYMOUS = "User:ANONYMOUS"

# OpenSSL's long names (what getpeercert() gives) -> RFC 2253 keywords Java writes
_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
# attributes Java writes as OID=#<DER hex>: OID and the DER tag of their string type
_AS_OID = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16)}  # IA5String

_SPECIAL = set(',+"\\<>;')


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in _SPECIAL else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _der_hex(tag: int, value: str) -> str:
    data = value.encode()
    if len(data) < 0x80:
        length = bytes([len(data)])
    else:
        size = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return "#" + (bytes([tag]) + length + data).hex()


def _attribute(name: str, value: str) -> str:
    if name in _KEYWORDS:
        return f"{_KEYWORDS[name]}={_escape(value)}"
    if name in _AS_OID:
        oid, tag = _AS_OID[name]
        return f"{oid}={_der_hex(tag, value)}"
    return f"{name}={_escape(value)}"  # rare attributes: OpenSSL's name, not Java's OID form


def rfc2253(subject) -> str:
    """The RFC 2253 string of a getpeercert() subject (RDNs in certificate order)."""
    return ",".join("+".join(_attribute(name, value) for name, value in rdn)
                    for rdn in reversed(subject))


def principal_of(peercert: dict | None) -> str:
    """`User:<subject>` for a verified client certificate, `User:ANONYMOUS` without one."""
    if not peercert or not peercert.get("subject"):
        return ANONYMOUS
    return "User:" + rfc2253(peercert["subject"])
