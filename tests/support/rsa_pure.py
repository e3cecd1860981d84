"""rsa_pure - RSA keys, RS256 signatures and JWTs in pure Python (stdlib only), for tests.

Why hand-written: the test suite may use only the Python standard library, which has no RSA.
This module is NOT constant-time and NOT for production; it signs and verifies test JWTs:

  * PEM/DER parsing of RSA keys: PKCS#1 RSAPrivateKey / RSAPublicKey, and their PKCS#8
    (PrivateKeyInfo) / SubjectPublicKeyInfo wrappers. Other key types (EC, ...) raise ValueError.
  * RSASSA-PKCS1-v1_5 with SHA-256 (RS256): sign() and verify().
  * base64url without padding, make_jwt() (RS256, HS256 and alg "none" for forgery tests),
    decode_jwt() (no verification), verify_jwt_rs256(), public_jwk() for a JWKS document.
"""

import base64
import hashlib
import hmac
import json
import os

# DER prefix of the DigestInfo for SHA-256 (RFC 8017 section 9.2, note 1).
SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")

OID_RSA_ENCRYPTION = "1.2.840.113549.1.1.1"
OID_EC_PUBLIC_KEY = "1.2.840.10045.2.1"


class RSAPublicKey:
    """An RSA public key (n, e)."""

    def __init__(self, n, e):
        self.n = n
        self.e = e

    @property
    def size_bytes(self):
        return (self.n.bit_length() + 7) // 8

    def __eq__(self, other):
        return isinstance(other, RSAPublicKey) and (self.n, self.e) == (other.n, other.e)

    def __repr__(self):
        return "RSAPublicKey(bits=%d, e=%d)" % (self.n.bit_length(), self.e)


class RSAPrivateKey:
    """An RSA private key with its CRT parameters."""

    def __init__(self, n, e, d, p, q, dp, dq, qinv):
        self.n, self.e, self.d = n, e, d
        self.p, self.q, self.dp, self.dq, self.qinv = p, q, dp, dq, qinv

    def public_key(self):
        return RSAPublicKey(self.n, self.e)

    @property
    def size_bytes(self):
        return (self.n.bit_length() + 7) // 8

    def __repr__(self):
        return "RSAPrivateKey(bits=%d)" % self.n.bit_length()


# --------------------------------------------------------------------------- base64url


def b64url_encode(data):
    """base64url without padding (RFC 7515 section 2). Accepts bytes or str."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_B64URL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")


def b64url_decode(text):
    """Decodes base64url with or without padding; raises ValueError on bad input."""
    if isinstance(text, bytes):
        text = text.decode("ascii")
    if any(c not in _B64URL_CHARS for c in text):
        raise ValueError("not base64url")
    text = text.rstrip("=")
    if len(text) % 4 == 1:
        raise ValueError("bad base64url length")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def int_to_bytes(value, length=None):
    if length is None:
        length = max(1, (value.bit_length() + 7) // 8)
    return value.to_bytes(length, "big")


# --------------------------------------------------------------------------- DER


class _Der:
    """A minimal DER reader over one buffer (definite lengths only)."""

    def __init__(self, data):
        self.data = bytes(data)
        self.pos = 0

    def at_end(self):
        return self.pos >= len(self.data)

    def read_tlv(self):
        if self.pos + 2 > len(self.data):
            raise ValueError("DER: truncated")
        tag = self.data[self.pos]
        length = self.data[self.pos + 1]
        self.pos += 2
        if length & 0x80:
            nbytes = length & 0x7F
            if nbytes == 0 or nbytes > 4 or self.pos + nbytes > len(self.data):
                raise ValueError("DER: bad length")
            length = int.from_bytes(self.data[self.pos : self.pos + nbytes], "big")
            self.pos += nbytes
        if self.pos + length > len(self.data):
            raise ValueError("DER: truncated value")
        value = self.data[self.pos : self.pos + length]
        self.pos += length
        return tag, value

    def expect(self, tag):
        got, value = self.read_tlv()
        if got != tag:
            raise ValueError("DER: expected tag 0x%02x, got 0x%02x" % (tag, got))
        return value

    def sequence(self):
        return _Der(self.expect(0x30))

    def integer(self):
        value = self.expect(0x02)
        if not value:
            raise ValueError("DER: empty INTEGER")
        return int.from_bytes(value, "big", signed=True)

    def oid(self):
        raw = self.expect(0x06)
        if not raw:
            raise ValueError("DER: empty OID")
        parts = [raw[0] // 40, raw[0] % 40]
        acc = 0
        for b in raw[1:]:
            acc = (acc << 7) | (b & 0x7F)
            if not b & 0x80:
                parts.append(acc)
                acc = 0
        return ".".join(str(p) for p in parts)


def pem_decode(pem):
    """Returns (label, der_bytes) of the first PEM block in `pem` (str or bytes)."""
    if isinstance(pem, bytes):
        pem = pem.decode("ascii")
    begin = pem.find("-----BEGIN ")
    if begin < 0:
        raise ValueError("no PEM block")
    label_end = pem.find("-----", begin + 11)
    label = pem[begin + 11 : label_end]
    end_marker = "-----END %s-----" % label
    end = pem.find(end_marker, label_end)
    if end < 0:
        raise ValueError("PEM block not terminated")
    body = "".join(pem[label_end + 5 : end].split())
    return label, base64.b64decode(body, validate=True)


def _rsa_private_from_pkcs1(der):
    seq = _Der(der).sequence()
    version = seq.integer()
    if version != 0:
        raise ValueError("unsupported RSAPrivateKey version %d" % version)
    fields = [seq.integer() for _ in range(8)]
    return RSAPrivateKey(*fields)


def _rsa_public_from_pkcs1(der):
    seq = _Der(der).sequence()
    return RSAPublicKey(seq.integer(), seq.integer())


def _algorithm(seq):
    alg = seq.sequence()
    return alg.oid()


def parse_private_key(pem):
    """Parses an RSA private key in PEM (PKCS#1 or PKCS#8). Raises ValueError otherwise."""
    label, der = pem_decode(pem)
    if label == "RSA PRIVATE KEY":
        return _rsa_private_from_pkcs1(der)
    if label == "PRIVATE KEY":
        seq = _Der(der).sequence()
        seq.integer()  # version
        oid = _algorithm(seq)
        if oid != OID_RSA_ENCRYPTION:
            raise ValueError("not an RSA key (algorithm %s)" % oid)
        return _rsa_private_from_pkcs1(seq.expect(0x04))
    raise ValueError("not an RSA private key (PEM label %r)" % label)


def parse_public_key(pem):
    """Parses an RSA public key in PEM (PKCS#1 RSAPublicKey or SubjectPublicKeyInfo), or the
    public half of a private key PEM. Raises ValueError for other key types."""
    label, der = pem_decode(pem)
    if label == "RSA PUBLIC KEY":
        return _rsa_public_from_pkcs1(der)
    if label == "PUBLIC KEY":
        seq = _Der(der).sequence()
        oid = _algorithm(seq)
        if oid != OID_RSA_ENCRYPTION:
            raise ValueError("not an RSA key (algorithm %s)" % oid)
        bits = seq.expect(0x03)
        if not bits or bits[0] != 0:
            raise ValueError("bad BIT STRING")
        return _rsa_public_from_pkcs1(bits[1:])
    if label in ("RSA PRIVATE KEY", "PRIVATE KEY"):
        return parse_private_key(pem).public_key()
    raise ValueError("not an RSA public key (PEM label %r)" % label)


def load_private_key(path):
    with open(path, "rb") as f:
        return parse_private_key(f.read())


def load_public_key(path):
    with open(path, "rb") as f:
        return parse_public_key(f.read())


def _maybe_path(key):
    """A str that is not PEM text but names a file is read as a PEM file."""
    if isinstance(key, str) and "-----BEGIN" not in key and os.path.isfile(key):
        with open(key, "rb") as f:
            return f.read()
    return key


def as_public_key(key):
    """Accepts RSAPublicKey, RSAPrivateKey, (n, e), PEM text/bytes, or a PEM file path."""
    key = _maybe_path(key)
    if isinstance(key, RSAPublicKey):
        return key
    if isinstance(key, RSAPrivateKey):
        return key.public_key()
    if isinstance(key, tuple) and len(key) == 2:
        return RSAPublicKey(int(key[0]), int(key[1]))
    if isinstance(key, (str, bytes)):
        return parse_public_key(key)
    raise TypeError("unsupported public key: %r" % type(key))


def as_private_key(key):
    """Accepts RSAPrivateKey, PEM text/bytes, or a PEM file path."""
    key = _maybe_path(key)
    if isinstance(key, RSAPrivateKey):
        return key
    if isinstance(key, (str, bytes)):
        return parse_private_key(key)
    raise TypeError("unsupported private key: %r" % type(key))


# --------------------------------------------------------------------------- RS256


def emsa_pkcs1_v15_sha256(message, k):
    """The EMSA-PKCS1-v1_5 encoding of SHA-256(message) for a k-byte modulus."""
    t = SHA256_DIGEST_INFO + hashlib.sha256(message).digest()
    if k < len(t) + 11:
        raise ValueError("key too short")
    return b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t


def sign(key, message):
    """RSASSA-PKCS1-v1_5 SHA-256 signature of `message` (bytes) with a private key."""
    key = as_private_key(key)
    k = key.size_bytes
    m = int.from_bytes(emsa_pkcs1_v15_sha256(message, k), "big")
    # CRT: s = m^d mod n, computed mod p and mod q.
    s1 = pow(m, key.dp, key.p)
    s2 = pow(m, key.dq, key.q)
    h = (key.qinv * (s1 - s2)) % key.p
    s = s2 + h * key.q
    if pow(s, key.e, key.n) != m:  # guard against a corrupt key
        raise ValueError("RSA signature self-check failed")
    return int_to_bytes(s, k)


def verify(key, message, signature):
    """True when `signature` is a valid RS256 signature of `message` under the public key."""
    key = as_public_key(key)
    k = key.size_bytes
    if len(signature) != k:
        return False
    s = int.from_bytes(signature, "big")
    if s >= key.n:
        return False
    em = int_to_bytes(pow(s, key.e, key.n), k)
    return hmac.compare_digest(em, emsa_pkcs1_v15_sha256(message, k))


# --------------------------------------------------------------------------- JWT


def _json_segment(obj):
    return b64url_encode(json.dumps(obj, separators=(",", ":"), sort_keys=False))


def make_jwt(claims, key=None, kid=None, alg="RS256", secret=None, header=None, typ="JWT"):
    """Builds a compact JWS.

    alg "RS256" signs with `key` (private key object or PEM). alg "HS256" signs with `secret`
    (bytes; a forgery often uses the public key PEM as the secret). alg "none" yields an empty
    signature. `header` entries override/extend the generated header ({"alg", "typ", "kid"}).
    """
    hdr = {"alg": alg}
    if typ is not None:
        hdr["typ"] = typ
    if kid is not None:
        hdr["kid"] = kid
    if header:
        hdr.update(header)
    signing_input = (_json_segment(hdr) + "." + _json_segment(claims)).encode("ascii")
    if alg == "RS256":
        if key is None:
            raise ValueError("RS256 needs a private key")
        sig = sign(key, signing_input)
    elif alg == "HS256":
        if secret is None:
            raise ValueError("HS256 needs a secret")
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        sig = hmac.new(secret, signing_input, hashlib.sha256).digest()
    elif alg == "none":
        sig = b""
    else:
        raise ValueError("unsupported alg %r" % alg)
    return signing_input.decode("ascii") + "." + b64url_encode(sig)


def decode_jwt(token):
    """Splits a compact JWS without verifying: returns (header, claims, signing_input, sig).
    Raises ValueError when it is not three base64url JSON parts."""
    if isinstance(token, bytes):
        token = token.decode("ascii")
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("JWT must have 3 parts, has %d" % len(parts))
    header = json.loads(b64url_decode(parts[0]))
    claims = json.loads(b64url_decode(parts[1]))
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise ValueError("JWT header and claims must be JSON objects")
    sig = b64url_decode(parts[2])
    return header, claims, (parts[0] + "." + parts[1]).encode("ascii"), sig


def verify_jwt_rs256(token, public_key):
    """Verifies alg and signature (not the claims). Returns (header, claims); raises ValueError."""
    header, claims, signing_input, sig = decode_jwt(token)
    if header.get("alg") != "RS256":
        raise ValueError("alg is %r, not RS256" % header.get("alg"))
    if not verify(public_key, signing_input, sig):
        raise ValueError("bad signature")
    return header, claims


def public_jwk(key, kid, alg="RS256"):
    """The JWK (RFC 7517) of an RSA public key, as found in a JWKS `keys` array."""
    pub = as_public_key(key)
    return {
        "kty": "RSA",
        "use": "sig",
        "alg": alg,
        "kid": kid,
        "n": b64url_encode(int_to_bytes(pub.n)),
        "e": b64url_encode(int_to_bytes(pub.e)),
    }
