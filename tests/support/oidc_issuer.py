"""oidc_issuer - a loopback OIDC issuer for end-to-end tests (Python 3 stdlib only).

Plays the part of https://token.actions.githubusercontent.com for the relay under test:

    GET /.well-known/jwks                 {"keys": [JWK, ...]}  (every key set with a kid)
    GET /.well-known/openid-configuration {"issuer": <url>, "jwks_uri": <url>/.well-known/jwks}

and mints GitHub-Actions-shaped ID tokens signed RS256 with tests/support/rsa_pure.py. The issuer
URL is http://127.0.0.1:<port> (the relay allows plain http for loopback issuers), so the relay
is started with CRCR_OIDC_ISSUERS=<issuer.url>; with path="/_services/token" it is
http://127.0.0.1:<port>/_services/token and serves both endpoints under it, as GitHub Enterprise
Server's Actions issuer https://HOST/_services/token does.

    iss = OIDCIssuer().start()                  # one key, kid "k1" (tests/data/keys/oidc.pem)
    tok = iss.token("org2/repo2")               # valid for 5 minutes
    hdr = {"Authorization": "Bearer " + tok}
    iss.forged("alg_none", "org2/repo2")        # forgeries the relay must refuse
    iss.stop()

Buildkite-shaped tokens (no "repository": organization_id/pipeline_id and the build's claims,
for an issuer the relay trusts as CRCR_OIDC_ISSUERS=buildkite=<issuer.url>):

    tok = iss.buildkite_token(BK_ORG, BK_PIPELINE, build_branch="main")

Forgeries (`forged(kind, repo)`):
    wrong_key      RS256 with a key that is not in the JWKS, claiming kid "k1"
    unknown_kid    RS256 with a key that is not in the JWKS, under a kid the JWKS lacks
    alg_none       {"alg":"none"}, empty signature
    hs256_pubkey   HS256 keyed with the issuer's public key PEM (the classic alg confusion)
    expired        exp (and iat/nbf) well in the past, beyond any leeway
    not_yet_valid  nbf well in the future
    wrong_aud      aud another audience
    no_repository  no "repository" claim
    unknown_iss    a valid signature but "iss" another (unconfigured) issuer
    tampered       a valid token whose claims were edited afterwards (repository changed)

Every JWKS request is recorded (`jwks_fetches()`); `fail_jwks(status)` makes the endpoint answer
an error instead (None restores it).

Token times (iat, nbf, exp) come from `clock` when one is given (a testclock.TestClock, the
relay's: `OIDCIssuer(clock=relay.clock)`), so that a test that moves the relay's clock mints
tokens on the relay's time; otherwise from time.time().
"""

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import relay as R
import rsa_pure

AUDIENCE = "pytorch-cross-repo-ci-relay"
JWKS_PATH = "/.well-known/jwks"
CONFIG_PATH = "/.well-known/openid-configuration"
ACTIONS_GHES_PATH = "/_services/token"  # GitHub Enterprise Server's Actions issuer is HOST + it
DEFAULT_TTL = 300  # GitHub's ID tokens live about 5 minutes
FORGERIES = ("wrong_key", "unknown_kid", "alg_none", "hs256_pubkey", "expired", "not_yet_valid",
             "wrong_aud", "no_repository", "unknown_iss", "tampered")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep test output clean
        pass

    def do_GET(self):
        issuer = self.server.issuer
        path = self.path.split("?", 1)[0]
        status, body = issuer._answer(path)
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class OIDCIssuer:
    """See the module docstring. Thread-safe."""

    def __init__(self, keys=None, audience=AUDIENCE, port=0, path="", clock=None):
        """keys: {kid: private key (PEM path, PEM text or rsa_pure key)}; default
        {"k1": tests/data/keys/oidc.pem}. The first kid is the default signing key. `path`
        puts the issuer under a path, as GitHub Enterprise Server's Actions issuer
        https://HOST/_services/token (ACTIONS_GHES_PATH). `clock`: a testclock.TestClock whose
        now() dates the tokens (default: the real clock)."""
        self.audience = audience
        self.clock = clock
        self._port = port
        self.path = path.rstrip("/")
        self._lock = threading.Lock()
        self._keys = {}
        for kid, key in (keys or {"k1": R.OIDC_KEY}).items():
            self._keys[kid] = rsa_pure.as_private_key(key)
        self._default_kid = next(iter(self._keys))
        self._fetches = []
        self._fail_status = None
        self._server = None
        self._thread = None
        # A key the JWKS never holds (the App key, a different 2048-bit RSA key).
        self.foreign_key = rsa_pure.as_private_key(R.APP_KEY)

    # -------------------------------------------------------------- lifecycle

    def start(self):
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), _Handler)
        self._server.daemon_threads = True
        self._server.issuer = self
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True,
                                        name="oidc-issuer")
        self._thread.start()
        return self

    def stop(self):
        srv, self._server = self._server, None
        if srv is None:
            return
        srv.shutdown()
        srv.server_close()
        if self._thread:
            self._thread.join(5)

    def __enter__(self):
        return self.start() if self._server is None else self

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return self._port

    @property
    def url(self):
        """The issuer identifier (no trailing slash): the "iss" of every token."""
        return "http://127.0.0.1:%d%s" % (self._port, self.path)

    # -------------------------------------------------------------- keys and the endpoint

    def add_key(self, kid, key):
        with self._lock:
            self._keys[kid] = rsa_pure.as_private_key(key)

    def remove_key(self, kid):
        with self._lock:
            self._keys.pop(kid, None)

    def private_key(self, kid=None):
        """The signing key of `kid` (default: the first one)."""
        with self._lock:
            return self._keys[self._default_kid if kid is None else kid]

    def kids(self):
        with self._lock:
            return list(self._keys)

    def jwks(self):
        with self._lock:
            return {"keys": [rsa_pure.public_jwk(k.public_key(), kid)
                             for kid, k in self._keys.items()]}

    def fail_jwks(self, status):
        """Answer `status` to JWKS requests from now on (None: serve the keys again)."""
        with self._lock:
            self._fail_status = status

    def jwks_fetches(self):
        """Monotonic times of the JWKS requests received, oldest first."""
        with self._lock:
            return list(self._fetches)

    def _answer(self, path):
        if self.path:
            if not path.startswith(self.path + "/"):
                return 404, {"message": "Not Found"}
            path = path[len(self.path):]
        if path == JWKS_PATH:
            with self._lock:
                self._fetches.append(time.monotonic())
                fail = self._fail_status
            if fail is not None:
                return fail, {"message": "unavailable"}
            return 200, self.jwks()
        if path == CONFIG_PATH:
            return 200, {"issuer": self.url, "jwks_uri": self.url + JWKS_PATH,
                         "id_token_signing_alg_values_supported": ["RS256"]}
        return 404, {"message": "Not Found"}

    # -------------------------------------------------------------- tokens

    def now(self):
        """Seconds since the epoch on the issuer's clock (the test clock when given)."""
        return self.clock.now() if self.clock is not None else time.time()

    def claims(self, repo, ttl=DEFAULT_TTL, now=None, **extra):
        """GitHub Actions ID token claims for a workflow of `repo`. `extra` overrides or adds
        claims; a value of None removes the claim."""
        now = int(self.now() if now is None else now)
        owner = repo.split("/", 1)[0]
        c = {
            "jti": str(uuid.uuid4()),
            "sub": "repo:%s:ref:refs/heads/main" % repo,
            "aud": self.audience,
            "ref": "refs/heads/main",
            "sha": "0" * 40,
            "repository": repo,
            "repository_owner": owner,
            "repository_owner_id": "1%06d" % (sum(map(ord, owner)) % 1000000),
            "repository_id": "2%06d" % (sum(map(ord, repo)) % 1000000),
            "run_id": "9000000001",
            "run_number": "7",
            "run_attempt": "1",
            "actor": "ci-bot",
            "workflow": "CRCR downstream CI",
            "event_name": "repository_dispatch",
            "ref_type": "branch",
            "job_workflow_ref": "%s/.github/workflows/crcr.yml@refs/heads/main" % repo,
            "runner_environment": "github-hosted",
            "iss": self.url,
            "nbf": now - 5,
            "iat": now - 5,
            "exp": now + ttl,
        }
        for k, v in extra.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v
        return c

    def buildkite_claims(self, organization_id, pipeline_id, ttl=DEFAULT_TTL, now=None, **extra):
        """Buildkite agent OIDC token claims (buildkite-agent oidc request-token) for a job of
        the pipeline `pipeline_id` of `organization_id`: no "repository". `extra` overrides or
        adds claims; a value of None (an id too) removes the claim."""
        now = int(self.now() if now is None else now)
        branch = extra.get("build_branch") or "main"
        c = {
            "iss": self.url,
            "sub": "organization:acme:pipeline:vllm-ci:ref:refs/heads/%s:commit:%s:step:build"
                   % (branch, "0" * 40),
            "aud": self.audience,
            "iat": now - 5,
            "nbf": now - 5,
            "exp": now + ttl,
            "organization_slug": "acme",
            "pipeline_slug": "vllm-ci",
            "build_number": 42,
            "build_branch": branch,
            "build_commit": "0" * 40,
            "build_source": "schedule",
            "step_key": "build",
            "job_id": str(uuid.uuid4()),
            "agent_id": str(uuid.uuid4()),
            "organization_id": organization_id,
            "pipeline_id": pipeline_id,
            "runner_environment": "buildkite-hosted",
        }
        c.update(extra)
        return {k: v for k, v in c.items() if v is not None}

    def buildkite_token(self, organization_id, pipeline_id, kid=None, **extra):
        """A valid Buildkite-shaped token (see buildkite_claims() for `extra`)."""
        return self.sign(self.buildkite_claims(organization_id, pipeline_id, **extra), kid=kid)

    def sign(self, claims, kid=None, key=None, alg="RS256", header=None):
        """Signs `claims` (RS256 with the key of `kid`, or with `key` under `kid`)."""
        kid = self._default_kid if kid is None else kid
        if key is None:
            with self._lock:
                key = self._keys[kid]
        return rsa_pure.make_jwt(claims, key=key, kid=kid, alg=alg, header=header)

    def token(self, repo, kid=None, **extra):
        """A valid token for `repo` (see claims() for `extra`)."""
        return self.sign(self.claims(repo, **extra), kid=kid)

    def bearer(self, repo, kid=None, **extra):
        """{"Authorization": "Bearer <token(repo)>"}."""
        return {"Authorization": "Bearer " + self.token(repo, kid=kid, **extra)}

    def forged(self, kind, repo):
        """A token the relay must refuse; `kind` is one of FORGERIES."""
        now = int(self.now())
        if kind == "wrong_key":
            return self.sign(self.claims(repo), kid=self._default_kid, key=self.foreign_key)
        if kind == "unknown_kid":
            return self.sign(self.claims(repo), kid="not-in-jwks", key=self.foreign_key)
        if kind == "alg_none":
            return rsa_pure.make_jwt(self.claims(repo), kid=self._default_kid, alg="none")
        if kind == "hs256_pubkey":
            pem = _public_pem(self._keys[self._default_kid])
            return rsa_pure.make_jwt(self.claims(repo), kid=self._default_kid, alg="HS256",
                                     secret=pem)
        if kind == "expired":
            return self.token(repo, now=now - 3600, ttl=300)
        if kind == "not_yet_valid":
            return self.token(repo, nbf=now + 3600, iat=now)
        if kind == "wrong_aud":
            return self.token(repo, aud="some-other-audience")
        if kind == "no_repository":
            return self.token(repo, repository=None)
        if kind == "unknown_iss":
            return self.token(repo, iss="https://token.actions.example.invalid")
        if kind == "tampered":
            good = self.token(repo).split(".")
            claims = self.claims(repo)
            claims["repository"] = "org4/repo4" if repo != "org4/repo4" else "org2/repo2"
            good[1] = rsa_pure.b64url_encode(json.dumps(claims, separators=(",", ":")))
            return ".".join(good)
        raise ValueError("unknown forgery %r" % kind)


def _public_pem(private_key):
    """The SubjectPublicKeyInfo PEM of `private_key` as served by the test data: the exact bytes
    of the matching *.pub.pem when there is one (what an attacker would download), else DER
    built here."""
    pub = private_key.public_key()
    for path in (R.OIDC_PUB, R.APP_PUB):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if rsa_pure.parse_public_key(data.decode("ascii")) == pub:
            return data
    return _spki_pem(pub).encode("ascii")


def _der_len(n):
    if n < 0x80:
        return bytes([n])
    b = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(b)]) + b


def _der(tag, content):
    return bytes([tag]) + _der_len(len(content)) + content


def _der_int(v):
    b = v.to_bytes(v.bit_length() // 8 + 1, "big")
    return _der(0x02, b)


def _spki_pem(pub):
    import base64
    rsa_pub = _der(0x30, _der_int(pub.n) + _der_int(pub.e))
    alg = _der(0x30, _der(0x06, bytes.fromhex("2a864886f70d010101")) + b"\x05\x00")
    spki = _der(0x30, alg + _der(0x03, b"\x00" + rsa_pub))
    b64 = base64.b64encode(spki).decode("ascii")
    lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
    return "-----BEGIN PUBLIC KEY-----\n" + "\n".join(lines) + "\n-----END PUBLIC KEY-----\n"
