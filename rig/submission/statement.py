"""Signed statements: an in-toto Statement v1 in a DSSE envelope, signed with Ed25519.

The layouts are the public ones (in-toto attestation framework, Statement v1; Dead Simple
Signing Envelope): the statement names its subjects (each file with its SHA-256) and carries a
predicate of our own type; the envelope holds the statement as base64 ``payload`` with its
``payloadType`` and one signature over DSSE's pre-authentication encoding

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

(LEN in ASCII decimal, SP one space), so that neither the type nor the body can be swapped.
Keys are Ed25519 (`cryptography`): the private key in PKCS#8 PEM (unencrypted, written owner
only), the public key in SubjectPublicKeyInfo PEM; a key's id is the SHA-256 of its raw 32
public bytes, in hex.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from rig.errors import ConfigError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: Our predicate's type (a URI naming the layout, not a page to fetch).
PREDICATE_TYPE = "https://neurobench-rig.dev/submission/v1"


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding of `body` with its `payload_type`."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def statement(subjects: dict[str, str], predicate: dict[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1: `subjects` name -> SHA-256 hex, in name order."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest}}
                    for name, digest in sorted(subjects.items())],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


# -- keys ---------------------------------------------------------------------------------------
def key_id(public: Ed25519PublicKey) -> str:
    """SHA-256 of the raw public key, hex."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_pem(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.PEM,
                               serialization.PublicFormat.SubjectPublicKeyInfo)


def refuse_to_overwrite(paths: tuple[Path, ...], what: str, hint: str) -> None:
    """`ConfigError` unless every path is new and its folder exists (keys and bundles are
    never overwritten)."""
    for p in paths:
        if p.exists():
            raise ConfigError(f"{p} exists: {what} is never overwritten", hint=hint)
        if not p.parent.is_dir():
            raise ConfigError(f"{p.parent} is not a folder",
                              hint="create it, or name a file in an existing folder")


def new_key_pair(out: Path) -> tuple[Path, Path, str]:
    """Write ``out.key`` (private, mode 0600, created exclusively) and ``out.pub``; refuse to
    overwrite either. Returns both paths and the key id."""
    key_path, pub_path = out.with_name(out.name + ".key"), out.with_name(out.name + ".pub")
    refuse_to_overwrite((key_path, pub_path), "a key",
                        "choose another --out name, or remove the old pair first")
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    # O_EXCL + 0600 from the start: the private key is never readable by others, not even
    # for a moment between writing it and a chmod.
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub_path.write_bytes(public_pem(private.public_key()))
    return key_path, pub_path, key_id(private.public_key())


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """An Ed25519 private key from PEM; `ConfigError` naming the file otherwise."""
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except OSError as exc:
        raise ConfigError(f"cannot read the signing key {path}: {exc.strerror or exc}",
                          hint="make one with `rig keys new --out NAME`") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path} is not an unencrypted PEM private key ({exc})",
                          hint="give the NAME.key that `rig keys new` wrote") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path} is not an Ed25519 key", hint="make one with `rig keys new`")
    return key


def load_public_key(data: bytes, where: str) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM bytes; `ValueError` naming `where` otherwise."""
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where} is not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{where} is not an Ed25519 public key")
    return key


# -- envelopes --------------------------------------------------------------------------------
def sign(statement_: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """A DSSE envelope of `statement_`, signed by `key`."""
    body = json.dumps(statement_, sort_keys=True, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")
    signature = key.sign(pae(PAYLOAD_TYPE, body))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(body).decode("ascii"),
        "signatures": [{"keyid": key_id(key.public_key()),
                        "sig": base64.b64encode(signature).decode("ascii")}],
    }


@dataclass(frozen=True)
class Opened:
    """An envelope whose signature was checked: the statement and who signed it."""

    statement: dict[str, Any]
    key_id: str


def open_envelope(envelope: Any, public: Ed25519PublicKey) -> Opened:
    """The statement of a DSSE envelope whose signature by `public` holds; `ValueError` saying
    what does not (a malformed envelope, another key's signature, a changed payload)."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("signatures"), list):
        raise ValueError("not a DSSE envelope (payloadType, payload, signatures)")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise ValueError(f"payloadType is {envelope.get('payloadType')!r}, not {PAYLOAD_TYPE}")
    try:
        body = base64.b64decode(str(envelope.get("payload", "")), validate=True)
    except ValueError:
        raise ValueError("the payload is not base64") from None
    want = key_id(public)
    sigs = [s for s in envelope["signatures"] if isinstance(s, dict) and s.get("keyid") == want]
    if not sigs:
        ids = ", ".join(str(s.get("keyid", "?"))[:16] for s in envelope["signatures"]
                        if isinstance(s, dict))
        raise ValueError(f"no signature by key {want[:16]}…: signed by {ids or 'nobody'}")
    try:
        public.verify(base64.b64decode(str(sigs[0].get("sig", "")), validate=True),
                      pae(PAYLOAD_TYPE, body))
    except (InvalidSignature, ValueError):
        raise ValueError(f"the signature by key {want[:16]}… does not hold: the statement "
                         "was changed after it was signed") from None
    try:
        value = json.loads(body)
    except ValueError:
        raise ValueError("the signed payload is not JSON") from None
    if not isinstance(value, dict) or value.get("_type") != STATEMENT_TYPE:
        raise ValueError(f"the signed payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    return Opened(value, want)
