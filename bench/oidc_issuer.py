"""oidc_issuer - the smallest OIDC issuer the callback benchmark needs (Python 3 stdlib only).

Serves GET /.well-known/jwks (and /.well-known/openid-configuration) on 127.0.0.1 with the public
half of tests/data/keys/oidc.pem, and mints RS256 tokens shaped like GitHub Actions OIDC tokens
(iss = this issuer's URL, aud, repository, repository_id, repository_owner_id, jti, iat/nbf/exp).
Signing uses tests/support/rsa_pure.py (the stdlib has no RSA); a token can be reused by many
callbacks until it expires, so a benchmark mints one per repository, not one per request.

    iss = OidcIssuer(key_path).start()
    token = iss.mint("org2/repo2", lifetime_s=900)
    ... relay env CRCR_OIDC_ISSUERS=iss.url ...
    iss.stop()
"""

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import rsa_pure

AUDIENCE = "pytorch-cross-repo-ci-relay"
KID = "crcr-bench-key"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        issuer = self.server.issuer
        path = self.path.split("?", 1)[0]
        if path == "/.well-known/jwks":
            body = issuer.jwks_bytes
        elif path == "/.well-known/openid-configuration":
            body = json.dumps({"issuer": issuer.url,
                               "jwks_uri": issuer.url + "/.well-known/jwks"}).encode()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        issuer.jwks_hits += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class OidcIssuer:
    """A JWKS endpoint plus a token minter. jwks_hits counts JWKS downloads."""

    def __init__(self, key_path, kid=KID):
        self.key = rsa_pure.load_private_key(key_path)
        self.kid = kid
        self.jwks_bytes = json.dumps({"keys": [rsa_pure.public_jwk(self.key, kid)]}).encode()
        self.jwks_hits = 0
        self._server = None
        self._thread = None

    def start(self):
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.issuer = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self._server.server_address[1]

    def mint(self, repository, lifetime_s=900, audience=AUDIENCE):
        """An RS256 token for `repository` (owner/name), valid for lifetime_s seconds."""
        now = int(time.time())
        owner = repository.split("/", 1)[0]
        claims = {
            "iss": self.url,
            "aud": audience,
            "sub": "repo:%s:ref:refs/heads/main" % repository,
            "repository": repository,
            "repository_owner": owner,
            "repository_id": str(abs(hash(repository)) % 10**9),
            "repository_owner_id": str(abs(hash(owner)) % 10**9),
            "event_name": "repository_dispatch",
            "ref": "refs/heads/main",
            "jti": str(uuid.uuid4()),
            "iat": now,
            "nbf": now,
            "exp": now + lifetime_s,
        }
        return rsa_pure.make_jwt(claims, self.key, kid=self.kid)
