"""The tool's key pair: its private key signs the client assertion of the token exchange; its
public half is the JWKS the platform checks that signature with (served by the service's HTTP side).

The private key is made once, in the service's own folder of the course (0700, hidden from students
as the gradebook is: ``course/secure.py``), as a file only its owner reads (0600, created exclusively:
never through a link planted in its place). It is never printed, logged or put in a page; a key
file another user can read is refused rather than used."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from attnkit.constants import GraderError
from attnkit.i18n import _

KEY_BITS = 2048
ALGORITHM = "RS256"


def ensure_key(path: Path) -> None:
    """Make the tool's private key at ``path`` unless it exists (its folder 0700, the file 0600)."""
    if path.exists():
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return  # made by another process meanwhile: that one is the key
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
        handle.flush()
        os.fsync(handle.fileno())


def private_pem(path: Path) -> bytes:
    """The private key's PEM, read without following a link, refused where others may read it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise GraderError(_("找不到本工具的私钥 {path}：先运行 attnkit lms-sync --dry-run（它会生成私钥）").format(path=path)) from None
    except OSError as error:
        raise GraderError(_("无法读取本工具的私钥 {path}：{reason}").format(path=path, reason=error.strerror)) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            refusal = _("本工具的私钥 {path} 其他用户也能读取（权限 {mode:04o}）：拒绝使用；请删除它，重新生成，并在平台上更新公钥")
            raise GraderError(refusal.format(path=path, mode=stat.S_IMODE(info.st_mode)))
        return handle.read()


def _b64(number: int) -> str:
    data = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_jwk(pem: bytes) -> dict[str, Any]:
    """The public half of the key as a JWK, with its RFC 7638 thumbprint as ``kid``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    numbers = key.public_key().public_numbers()
    essential = {"e": _b64(numbers.e), "kty": "RSA", "n": _b64(numbers.n)}
    thumbprint = hashlib.sha256(json.dumps(essential, separators=(",", ":"), sort_keys=True).encode()).digest()
    return essential | {"kid": base64.urlsafe_b64encode(thumbprint).rstrip(b"=").decode(), "alg": ALGORITHM, "use": "sig"}


def jwks(path: Path) -> dict[str, Any]:
    """The tool's JSON Web Key Set (its public key only), made first if missing."""
    ensure_key(path)
    return {"keys": [public_jwk(private_pem(path))]}
