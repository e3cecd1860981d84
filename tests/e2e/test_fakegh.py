"""Self-tests of the test support code: the fake GitHub (fakegh), the pure-Python RSA/JWT module
(rsa_pure) and the harness helpers (relay.sign, raw sockets). Runs without the relay binary.

If these fail, every relay end-to-end test built on them is meaningless, so each test here
checks a property the relay tests rely on (a good JWT is accepted AND a bad one refused, etc.).
"""

import base64
import calendar
import http.client
import json
import re
import socket
import subprocess
import threading
import time
import unittest

import fakegh
import relay
import rsa_pure
from testclock import TestClock
from waiting import wait_until

APP_ID = 12345


def read(path):
    with open(path, encoding="ascii") as f:
        return f.read()


def app_jwt(key, iss=APP_ID, iat_delta=-60, exp_delta=540, now=None, **kw):
    now = int(time.time() if now is None else now)
    return rsa_pure.make_jwt({"iss": iss, "iat": now + iat_delta, "exp": now + exp_delta}, key,
                             **kw)


class RsaPureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.app = rsa_pure.load_private_key(relay.APP_KEY)
        cls.app_pub = rsa_pure.load_public_key(relay.APP_PUB)
        cls.oidc = rsa_pure.load_private_key(relay.OIDC_KEY)
        cls.oidc_pub = rsa_pure.load_public_key(relay.OIDC_PUB)

    def test_pkcs1_and_pkcs8_private_keys_match_their_spki_public_keys(self):
        self.assertEqual(self.app.public_key(), self.app_pub)  # PKCS#1 private vs SPKI
        self.assertEqual(self.oidc.public_key(), self.oidc_pub)  # PKCS#8 private vs SPKI
        self.assertNotEqual(self.app_pub, self.oidc_pub)
        self.assertEqual(self.app_pub.n.bit_length(), 2048)
        self.assertEqual(self.app_pub.e, 65537)

    def test_pkcs1_public_key_pem_parses(self):
        # Build the PKCS#1 RSAPublicKey DER by hand: SEQUENCE { n, e }.
        def der_int(v):
            b = v.to_bytes((v.bit_length() + 8) // 8, "big")
            return b"\x02" + der_len(len(b)) + b

        def der_len(n):
            return bytes([n]) if n < 128 else b"\x82" + n.to_bytes(2, "big")

        body = der_int(self.app_pub.n) + der_int(self.app_pub.e)
        der = b"\x30" + der_len(len(body)) + body
        pem = ("-----BEGIN RSA PUBLIC KEY-----\n" + base64.encodebytes(der).decode()
               + "-----END RSA PUBLIC KEY-----\n")
        self.assertEqual(rsa_pure.parse_public_key(pem), self.app_pub)

    def test_ec_keys_are_refused(self):
        with self.assertRaises(ValueError):
            rsa_pure.load_private_key(relay.EC_KEY)
        with self.assertRaises(ValueError):
            rsa_pure.load_public_key(relay.EC_PUB)

    def test_signature_is_identical_to_openssl_and_verifies_only_the_signed_message(self):
        msg = b"crcr test message \x00\xff"
        ours = rsa_pure.sign(self.app, msg)
        theirs = subprocess.run(["openssl", "dgst", "-sha256", "-sign", relay.APP_KEY],
                                input=msg, capture_output=True, check=True).stdout
        # PKCS#1 v1.5 is deterministic: an independent implementation must produce the same bytes.
        self.assertEqual(ours, theirs)
        self.assertTrue(rsa_pure.verify(self.app_pub, msg, theirs))
        self.assertFalse(rsa_pure.verify(self.app_pub, msg + b"x", theirs))
        self.assertFalse(rsa_pure.verify(self.oidc_pub, msg, theirs))
        flipped = bytes([theirs[0] ^ 1]) + theirs[1:]
        self.assertFalse(rsa_pure.verify(self.app_pub, msg, flipped))
        self.assertFalse(rsa_pure.verify(self.app_pub, msg, theirs[:-1]))

    def test_jwt_roundtrip_and_forgeries(self):
        tok = rsa_pure.make_jwt({"iss": "x", "n": 1}, self.oidc, kid="k1")
        header, claims = rsa_pure.verify_jwt_rs256(tok, self.oidc_pub)
        self.assertEqual(header, {"alg": "RS256", "typ": "JWT", "kid": "k1"})
        self.assertEqual(claims, {"iss": "x", "n": 1})
        self.assertNotIn("=", tok)
        none_tok = rsa_pure.make_jwt({"iss": "x"}, alg="none")
        self.assertTrue(none_tok.endswith("."))
        with self.assertRaises(ValueError):
            rsa_pure.verify_jwt_rs256(none_tok, self.oidc_pub)
        hs = rsa_pure.make_jwt({"iss": "x"}, alg="HS256", secret=read(relay.OIDC_PUB))
        self.assertEqual(rsa_pure.decode_jwt(hs)[0]["alg"], "HS256")
        with self.assertRaises(ValueError):
            rsa_pure.verify_jwt_rs256(hs, self.oidc_pub)
        with self.assertRaises(ValueError):
            rsa_pure.verify_jwt_rs256(tok, self.app_pub)

    def test_public_jwk_encodes_modulus_and_exponent(self):
        jwk = rsa_pure.public_jwk(self.oidc_pub, "kid-1")
        self.assertEqual(jwk["kty"], "RSA")
        self.assertEqual(jwk["e"], "AQAB")
        self.assertEqual(int.from_bytes(rsa_pure.b64url_decode(jwk["n"]), "big"), self.oidc_pub.n)


class HarnessHelpersTest(unittest.TestCase):
    def test_sign_matches_githubs_published_test_vector(self):
        self.assertEqual(
            relay.sign(b"Hello, World!", "It's a Secret to Everybody"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")

    def test_examples_are_real_payloads_retargeted_to_pytorch(self):
        names = ["pull_request.opened", "pull_request.synchronize", "pull_request.reopened",
                 "pull_request.closed", "pull_request.labeled", "pull_request.assigned", "push",
                 "push.deleted", "issues.opened", "ping", "check_run.rerequested",
                 "check_suite.rerequested"]
        for name in names:
            with self.subTest(name=name):
                raw = relay.load_example(name)
                obj = json.loads(raw)
                self.assertEqual(raw, relay.compact(obj), "stored compact")
                self.assertEqual(obj["repository"]["full_name"], "pytorch/pytorch")
                if "." in name and not name.startswith("push"):
                    self.assertEqual(obj["action"], name.split(".", 1)[1])
        deleted = relay.load_example_obj("push.deleted")
        self.assertTrue(deleted["deleted"])
        self.assertEqual(deleted["after"], "0" * 40)
        self.assertTrue(deleted["ref"].startswith("refs/heads/"))
        self.assertIsNone(deleted["head_commit"])
        push = relay.load_example_obj("push")
        self.assertFalse(push["deleted"])
        self.assertTrue(push["commits"])
        label = relay.load_example_obj("pull_request.labeled")["label"]["name"]
        self.assertFalse(label.startswith("ciflow/"))

    def test_raw_request_and_parse_response_handle_100_continue_and_chunked(self):
        with fakegh.FakeGitHub(APP_ID, relay.APP_PUB, contract=False) as gh:
            raw = relay.raw_request(
                gh.port,
                b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2.0)
            r = relay.parse_response(raw)
            self.assertEqual(r.status, 404)
            self.assertEqual(json.loads(r.body)["message"], "Not Found")
        r = relay.parse_response(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413 X\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n"
                                 b"0\r\n\r\n")
        self.assertEqual((r.status, r.body), (413, b"abcde"))
        with self.assertRaises(ValueError):
            relay.parse_response(b"HTTP/1.1 200 OK\r\nContent-")


class FakeGitHubTestBase(unittest.TestCase):
    def setUp(self):
        self.key = rsa_pure.load_private_key(relay.APP_KEY)
        # Deliberately wrong requests are part of these tests: no contract check (test_contract).
        self.gh = fakegh.FakeGitHub(APP_ID, read(relay.APP_PUB),
                                    installed_repos={"org1/repo1", "org1/repo2", "org2/repo"},
                                    contract=False)
        self.gh.start()
        self.addCleanup(self.gh.stop)

    def call(self, method, path, body=None, headers=None, conn=None):
        c = conn or http.client.HTTPConnection("127.0.0.1", self.gh.port, timeout=10)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
            return r.status, hdrs, data
        finally:
            if conn is None:
                c.close()

    def jwt_headers(self, **kw):
        return {"Authorization": "Bearer " + app_jwt(self.key, **kw)}

    def token_for(self, owner_repo):
        st, _, body = self.call("GET", "/repos/%s/installation" % owner_repo,
                                headers=self.jwt_headers())
        self.assertEqual(st, 200, body)
        iid = json.loads(body)["id"]
        st, _, body = self.call("POST", "/app/installations/%d/access_tokens" % iid,
                                headers=self.jwt_headers())
        self.assertEqual(st, 201, body)
        return json.loads(body)["token"]

    def dispatch(self, repo, body, token):
        return self.call("POST", "/repos/%s/dispatches" % repo, body,
                         {"Authorization": "Bearer " + token})


class FakeGitHubAuthTest(FakeGitHubTestBase):
    def test_good_jwt_gets_installation_with_id_above_2_pow_31(self):
        for iss in (APP_ID, str(APP_ID)):
            with self.subTest(iss=iss):
                st, hdrs, body = self.call("GET", "/repos/org1/repo1/installation",
                                           headers=self.jwt_headers(iss=iss))
                self.assertEqual(st, 200, body)
                inst = json.loads(body)
                self.assertGreater(inst["id"], 2**31)
                self.assertEqual(inst["account"]["login"], "org1")
                self.assertEqual(hdrs["content-length"], str(len(body)))

    def test_installation_ids_are_per_owner(self):
        ids = {}
        for repo in ("org1/repo1", "org1/repo2", "org2/repo"):
            st, _, body = self.call("GET", "/repos/%s/installation" % repo,
                                    headers=self.jwt_headers())
            self.assertEqual(st, 200)
            ids[repo] = json.loads(body)["id"]
        self.assertEqual(ids["org1/repo1"], ids["org1/repo2"])
        self.assertNotEqual(ids["org1/repo1"], ids["org2/repo"])

    def test_bad_jwts_are_rejected_with_githubs_message(self):
        other = rsa_pure.load_private_key(relay.OIDC_KEY)
        now = int(time.time())
        good = app_jwt(self.key)
        h, c, si, sig = rsa_pure.decode_jwt(good)
        tampered_claims = (good.split(".")[0] + "." +
                           rsa_pure.b64url_encode(json.dumps({"iss": 999, "iat": now - 60,
                                                              "exp": now + 500}))
                           + "." + good.split(".")[2])
        cases = {
            "signed with another key": app_jwt(other),
            "claims changed after signing": tampered_claims,
            "expired": app_jwt(self.key, iat_delta=-100, exp_delta=-1),
            "wrong iss": app_jwt(self.key, iss=54321),
            "iss missing": rsa_pure.make_jwt({"iat": now - 60, "exp": now + 500}, self.key),
            "lifetime over 10 min": app_jwt(self.key, iat_delta=-60, exp_delta=660),
            "iat in the future": app_jwt(self.key, iat_delta=30, exp_delta=500),
            "iat too old": app_jwt(self.key, iat_delta=-200, exp_delta=300),
            "alg none": rsa_pure.make_jwt({"iss": APP_ID, "iat": now - 60, "exp": now + 500},
                                          alg="none"),
            "HS256 with the public key": rsa_pure.make_jwt(
                {"iss": APP_ID, "iat": now - 60, "exp": now + 500}, alg="HS256",
                secret=read(relay.APP_PUB)),
            "two parts": ".".join(good.split(".")[:2]),
            "not base64": "a.b.c",
        }
        for name, tok in cases.items():
            with self.subTest(name=name):
                st, _, body = self.call("GET", "/repos/org1/repo1/installation",
                                        headers={"Authorization": "Bearer " + tok})
                self.assertEqual(st, 401, body)
                self.assertEqual(json.loads(body)["message"], fakegh.JWT_ERROR)
        st, _, _ = self.call("GET", "/repos/org1/repo1/installation")
        self.assertEqual(st, 401)
        # And the boundary the relay uses (iat = now-60, exp = now+540 -> 600 s) is accepted.
        st, _, _ = self.call("GET", "/repos/org1/repo1/installation",
                             headers=self.jwt_headers(iat_delta=-60, exp_delta=540))
        self.assertEqual(st, 200)

    def test_not_installed_repo_is_404(self):
        st, _, body = self.call("GET", "/repos/org9/repo/installation", headers=self.jwt_headers())
        self.assertEqual(st, 404)
        self.assertEqual(json.loads(body)["message"], "Not Found")

    def test_token_flow_and_token_scope(self):
        st, _, body = self.call("GET", "/repos/org1/repo1/installation",
                                headers=self.jwt_headers())
        iid = json.loads(body)["id"]
        t0 = time.time()
        st, _, body = self.call("POST", "/app/installations/%d/access_tokens" % iid,
                                headers=self.jwt_headers())
        self.assertEqual(st, 201)
        tok = json.loads(body)
        self.assertRegex(tok["token"], r"^ghs_[A-Za-z0-9]{36,}$")
        exp = calendar.timegm(time.strptime(tok["expires_at"], "%Y-%m-%dT%H:%M:%SZ"))
        self.assertAlmostEqual(exp - t0, 3600, delta=5)
        ok = {"event_type": "pull_request", "client_payload": {"a": 1}}
        self.assertEqual(self.dispatch("org1/repo1", ok, tok["token"])[0], 204)
        self.assertEqual(self.dispatch("org1/repo2", ok, tok["token"])[0], 204)
        # A token of org1's installation does not open org2's repo; unknown tokens fail.
        self.assertEqual(self.dispatch("org2/repo", ok, tok["token"])[0], 401)
        self.assertEqual(self.dispatch("org1/repo1", ok, "ghs_" + "x" * 36)[0], 401)
        st, _, _ = self.call("POST", "/repos/org1/repo1/dispatches", ok)
        self.assertEqual(st, 401)
        # The App JWT itself is not an installation token.
        st, _, _ = self.call("POST", "/repos/org1/repo1/dispatches", ok, self.jwt_headers())
        self.assertEqual(st, 401)
        # Unknown installation id.
        st, _, _ = self.call("POST", "/app/installations/%d/access_tokens" % (iid + 999),
                             headers=self.jwt_headers())
        self.assertEqual(st, 404)
        # Access tokens need the App JWT.
        st, _, _ = self.call("POST", "/app/installations/%d/access_tokens" % iid,
                             headers={"Authorization": "Bearer " + tok["token"]})
        self.assertEqual(st, 401)
        self.assertEqual([d["repo"] for d in self.gh.dispatches()], ["org1/repo1", "org1/repo2"])
        self.assertEqual(self.gh.dispatches()[0]["installation_id"], iid)

    def test_token_expires_on_the_fakes_clock_and_revocation_works(self):
        tok = self.token_for("org1/repo1")
        ok = {"event_type": "push", "client_payload": {}}
        self.assertEqual(self.dispatch("org1/repo1", ok, tok)[0], 204)
        self.gh.time_offset = 3601
        st, _, body = self.dispatch("org1/repo1", ok, tok)
        self.assertEqual(st, 401)
        self.assertEqual(json.loads(body)["message"], "Bad credentials")
        self.assertEqual(self.gh.requests("POST", "dispatches$")[-1].note, "expired token")
        self.gh.time_offset = 0
        self.assertEqual(self.dispatch("org1/repo1", ok, tok)[0], 204)
        self.gh.revoke_tokens()
        self.assertEqual(self.dispatch("org1/repo1", ok, tok)[0], 401)

    def test_token_ttl_is_configurable_and_stateless_format_is_long(self):
        self.gh.token_ttl = 120
        self.gh.token_format = "stateless"
        t0 = time.time()
        st, _, body = self.call("GET", "/repos/org1/repo1/installation",
                                headers=self.jwt_headers())
        iid = json.loads(body)["id"]
        st, _, body = self.call("POST", "/app/installations/%d/access_tokens" % iid,
                                headers=self.jwt_headers())
        tok = json.loads(body)
        exp = calendar.timegm(time.strptime(tok["expires_at"], "%Y-%m-%dT%H:%M:%SZ"))
        self.assertAlmostEqual(exp - t0, 120, delta=5)
        self.assertGreaterEqual(len(tok["token"]), 500)
        self.assertEqual(tok["token"].count("."), 2)
        self.assertRegex(tok["token"], r"^ghs_[A-Za-z0-9._]{36,}$")
        ok = {"event_type": "push", "client_payload": {}}
        self.assertEqual(self.dispatch("org1/repo1", ok, tok["token"])[0], 204)


class FakeGitHubDispatchTest(FakeGitHubTestBase):
    def setUp(self):
        super().setUp()
        self.tok = self.token_for("org1/repo1")

    def test_dispatch_validation_like_github(self):
        def cp(n):
            return {"k%d" % i: i for i in range(n)}

        cases = [
            ("missing event_type", {"client_payload": {}}, "event_type"),
            ("empty event_type", {"event_type": "", "client_payload": {}}, "too short"),
            ("101-char event_type", {"event_type": "e" * 101}, "too long"),
            ("numeric event_type", {"event_type": 5}, "not a string"),
            ("list client_payload", {"event_type": "e", "client_payload": [1]}, "not an object"),
            ("11 keys", {"event_type": "e", "client_payload": cp(11)}, "No more than 10"),
            ("body not an object", [1, 2], "not an object"),
        ]
        for name, body, msg in cases:
            with self.subTest(name=name):
                st, _, out = self.dispatch("org1/repo1", body, self.tok)
                self.assertEqual(st, 422, out)
                self.assertIn(msg, json.loads(out)["message"])
        st, _, out = self.dispatch("org1/repo1", b"{not json", self.tok)
        self.assertEqual(st, 400)
        self.assertEqual(json.loads(out)["message"], "Problems parsing JSON")
        self.assertEqual(self.gh.dispatches(), [])

    def test_dispatch_limits_accept_the_boundary_values(self):
        st, _, _ = self.dispatch("org1/repo1", {"event_type": "e" * 100,
                                                "client_payload": {"k%d" % i: i
                                                                   for i in range(10)}}, self.tok)
        self.assertEqual(st, 204)

        def body_of(size):
            skeleton = json.dumps({"event_type": "pull_request", "client_payload": {"p": ""}},
                                  separators=(",", ":")).encode()
            pad = size - len(skeleton)
            return json.dumps({"event_type": "pull_request", "client_payload": {"p": "x" * pad}},
                              separators=(",", ":")).encode()

        b = body_of(65535)
        self.assertEqual(len(b), 65535)
        st, _, out = self.dispatch("org1/repo1", b, self.tok)
        self.assertEqual(st, 204, out)
        b = body_of(65536)
        st, _, out = self.dispatch("org1/repo1", b, self.tok)
        self.assertEqual(st, 422)
        self.assertEqual(json.loads(out)["message"], "client_payload is too large")
        d = self.gh.dispatches()
        self.assertEqual(len(d), 2)
        self.assertEqual(len(d[1]["body"]), 65535)

    def test_success_is_204_without_body_and_recorded_exactly(self):
        body = b'{"event_type":"pull_request","client_payload":{"delivery_id":"d1","payload":{}}}'
        st, hdrs, out = self.dispatch("org1/repo1", body, self.tok)
        self.assertEqual((st, out), (204, b""))
        self.assertNotIn("content-length", hdrs)
        for h in ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
                  "x-ratelimit-used"):
            self.assertIn(h, hdrs)
        rec = self.gh.requests("POST", r"/dispatches$")[-1]
        self.assertEqual(rec.body, body)
        self.assertEqual(rec.status, 204)
        self.assertEqual(rec.headers["authorization"], "Bearer " + self.tok)
        d = self.gh.dispatches()[-1]
        self.assertEqual((d["repo"], d["event_type"], d["body"]), ("org1/repo1", "pull_request",
                                                                   body))


class FakeGitHubHttpTest(FakeGitHubTestBase):
    def test_keep_alive_reuses_one_connection(self):
        c = http.client.HTTPConnection("127.0.0.1", self.gh.port, timeout=10)
        self.addCleanup(c.close)
        for _ in range(3):
            st, hdrs, body = self.call("GET", "/repos/org1/repo1/installation",
                                       headers=self.jwt_headers(), conn=c)
            self.assertEqual(st, 200)
            self.assertEqual(int(hdrs["content-length"]), len(body))
        ports = {r.client_port for r in self.gh.requests()}
        self.assertEqual(len(ports), 1)
        self.assertEqual(len(self.gh.requests()), 3)

    def test_expect_100_continue_is_honoured(self):
        tok = self.token_for("org1/repo1")
        body = b'{"event_type":"x","client_payload":{}}'
        s = socket.create_connection(("127.0.0.1", self.gh.port), timeout=5)
        self.addCleanup(s.close)
        s.sendall(b"POST /repos/org1/repo1/dispatches HTTP/1.1\r\nHost: x\r\n"
                  b"Authorization: Bearer " + tok.encode() + b"\r\nExpect: 100-continue\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        first = s.recv(100)
        self.assertTrue(first.startswith(b"HTTP/1.1 100"), first)
        s.sendall(body)
        rest = relay._read_response(s, 5)
        self.assertEqual(relay.parse_response(first + rest).status, 204)

    def test_requests_are_recorded_with_lowercase_headers_query_and_body(self):
        self.call("POST", "/some/where?a=1&b=two", b"payload", {"X-Mixed-Case": "V"})
        rec = self.gh.requests("POST", r"^/some/")[0]
        self.assertEqual(rec.method, "POST")
        self.assertEqual(rec.path, "/some/where")
        self.assertEqual(rec.query, {"a": "1", "b": "two"})
        self.assertEqual(rec.headers["x-mixed-case"], "V")
        self.assertEqual(rec.body, b"payload")
        self.assertEqual(rec.status, 404)
        self.assertIsInstance(rec.time, float)
        self.assertEqual(self.gh.requests("GET"), [])
        self.gh.clear()
        self.assertEqual(self.gh.requests(), [])

    def test_rate_limit_headers_count_requests(self):
        h1 = self.call("GET", "/x")[1]
        h2 = self.call("GET", "/x")[1]
        self.assertEqual(h1["x-ratelimit-limit"], "5000")
        self.assertEqual(int(h2["x-ratelimit-used"]), int(h1["x-ratelimit-used"]) + 1)
        self.assertEqual(int(h2["x-ratelimit-remaining"]), int(h1["x-ratelimit-remaining"]) - 1)
        self.assertGreater(int(h1["x-ratelimit-reset"]), time.time())

    def test_global_latency_delays_every_answer(self):
        # Real time is the subject (the fake's latency, for benchmarks): a lower bound only.
        self.gh.latency_ms = 150
        t0 = time.monotonic()
        self.call("GET", "/x")
        self.assertGreaterEqual(time.monotonic() - t0, 0.15)

    def test_concurrent_requests_are_served_in_parallel(self):
        # Eight requests held at once: each has a thread of its own (no timing needed).
        hold = self.gh.hold(path_re="^/x$", count=None, after=False)
        self.addCleanup(hold.release)
        results = []

        def one():
            results.append(self.call("GET", "/x")[0])

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        self.assertTrue(wait_until(lambda: len(hold.held) == 8, 10), len(hold.held))
        self.assertEqual(results, [])
        hold.release()
        for t in threads:
            t.join(10)
        self.assertEqual(results, [404] * 8)

    def test_a_test_clock_dates_tokens_jwts_and_rate_limit_resets(self):
        clock = TestClock()
        self.addCleanup(clock.close)
        gh = fakegh.FakeGitHub(APP_ID, read(relay.APP_PUB), clock=clock).start()
        self.addCleanup(gh.stop)
        clock.advance(7200)  # two hours ahead of the real clock
        self.gh = gh
        # A JWT dated on the real clock is two hours old for the fake; one on its clock is good.
        self.assertEqual(self.call("GET", "/repos/org1/repo1/installation",
                                   headers=self.jwt_headers())[0], 401)
        st, h, body = self.call("GET", "/repos/org1/repo1/installation",
                                headers=self.jwt_headers(now=clock.now()))
        self.assertEqual(st, 200, body)
        self.assertAlmostEqual(int(h["x-ratelimit-reset"]), clock.now() + 3600, delta=5)
        iid = json.loads(body)["id"]
        st, _, body = self.call("POST", "/app/installations/%d/access_tokens" % iid,
                                headers=self.jwt_headers(now=clock.now()))
        self.assertEqual(st, 201, body)
        exp = calendar.timegm(time.strptime(json.loads(body)["expires_at"],
                                            "%Y-%m-%dT%H:%M:%SZ"))
        self.assertAlmostEqual(exp - clock.now(), 3600, delta=5)
        # An hour later on that clock the token is expired.
        tok = json.loads(body)["token"]
        clock.advance(3601)
        st, _, body = self.dispatch("org1/repo1", {"event_type": "x", "client_payload": {}}, tok)
        self.assertEqual(st, 401, body)


class FakeGitHubFaultTest(FakeGitHubTestBase):
    def test_count_limited_fault_then_normal_answers(self):
        f = self.gh.fault_5xx(r"/installation$", status=502, count=2)
        got = [self.call("GET", "/repos/org1/repo1/installation", headers=self.jwt_headers())[0]
               for _ in range(4)]
        self.assertEqual(got, [502, 502, 200, 200])
        self.assertEqual(f.hits, 2)
        self.assertIs(self.gh.requests()[0].fault, f)
        self.assertIsNone(self.gh.requests()[3].fault)

    def test_method_filter_and_first_matching_rule_wins(self):
        self.gh.add_fault(method="POST", path_re="/x", status=500, count=None)
        self.gh.add_fault(path_re="/x", status=503, count=1)
        self.gh.add_fault(path_re="/x", status=504, count=None)
        self.assertEqual(self.call("POST", "/x")[0], 500)
        self.assertEqual(self.call("GET", "/x")[0], 503)
        self.assertEqual(self.call("GET", "/x")[0], 504)
        self.gh.clear_faults()
        self.assertEqual(self.call("GET", "/x")[0], 404)

    def test_probabilistic_faults_are_seeded_and_about_the_right_share(self):
        def pattern(seed):
            gh = fakegh.FakeGitHub(APP_ID, relay.APP_PUB, contract=False).start()
            try:
                gh.add_fault(path_re="/x", status=500, probability=0.3, seed=seed)
                c = http.client.HTTPConnection("127.0.0.1", gh.port, timeout=10)
                out = []
                for _ in range(200):
                    c.request("GET", "/x")
                    r = c.getresponse()
                    r.read()
                    out.append(r.status)
                c.close()
                return out
            finally:
                gh.stop()

        a, b, c = pattern(7), pattern(7), pattern(8)
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        self.assertTrue(30 <= a.count(500) <= 90, a.count(500))
        self.assertEqual(set(a), {404, 500})

    def test_rate_limit_fault_helpers(self):
        self.gh.fault_429("/a", retry_after=7)
        st, h, body = self.call("GET", "/a")
        self.assertEqual((st, h["retry-after"]), (429, "7"))
        self.gh.fault_secondary_limit("/b", retry_after=60)
        st, h, body = self.call("POST", "/b")
        self.assertEqual((st, h["retry-after"]), (403, "60"))
        self.assertIn("secondary rate limit", json.loads(body)["message"])
        self.gh.fault_primary_limit("/c", reset_in=120, status=429)
        st, h, body = self.call("POST", "/c")
        self.assertEqual((st, h["x-ratelimit-remaining"]), (429, "0"))
        self.assertAlmostEqual(int(h["x-ratelimit-reset"]), time.time() + 120, delta=5)
        self.assertNotIn("retry-after", h)
        self.gh.fault_not_installed("org1/repo1")
        st, _, body = self.call("GET", "/repos/org1/repo1/installation",
                                headers=self.jwt_headers())
        self.assertEqual(st, 404)
        # Each helper defaults to one hit (not_installed: unlimited).
        self.assertEqual(self.call("GET", "/a")[0], 404)
        self.assertEqual(self.call("GET", "/repos/org1/repo1/installation",
                                   headers=self.jwt_headers())[0], 404)

    def test_delay_fault_answers_normally_after_the_delay(self):
        # Real time is the subject (the fake's delay, for benchmarks): a lower bound only.
        f = self.gh.fault_delay(r"/installation$", delay_ms=300, count=1)
        t0 = time.monotonic()
        st, _, _ = self.call("GET", "/repos/org1/repo1/installation", headers=self.jwt_headers())
        self.assertEqual(st, 200)
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        st, _, _ = self.call("GET", "/repos/org1/repo1/installation", headers=self.jwt_headers())
        self.assertEqual(st, 200)
        first, second = self.gh.requests("GET", "/installation$")
        self.assertIs(first.fault, f)
        self.assertIsNone(second.fault)  # count=1: the second answer was not delayed
        self.assertEqual(f.hits, 1)

    def test_hold_can_let_the_first_requests_through_and_hold_all_the_others(self):
        hold = self.gh.hold(path_re="/x", count=None, after=False, skip=2)
        self.assertEqual([self.call("GET", "/x")[0] for _ in range(2)], [404, 404])
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(self.call("GET", "/x")[0]))
                   for _ in range(3)]
        for t in threads:
            t.start()
        wait_until(lambda: len(hold.held) >= 3, 10)
        self.assertEqual(len(hold.held), 3)
        self.assertEqual(answers, [])  # nothing answered while held
        hold.release()
        for t in threads:
            t.join(10)
        self.assertEqual(answers, [404, 404, 404])
        self.assertEqual(self.call("GET", "/x")[0], 404)  # released: holds no more
        self.assertEqual(len(hold.held), 3)

    def test_keyed_draws_do_not_depend_on_the_order_requests_arrive_in(self):
        def statuses(order):
            gh = fakegh.FakeGitHub(APP_ID, relay.APP_PUB, contract=False).start()
            try:
                gh.add_fault(path_re="/k/", status=502, probability=0.3, seed=5,
                             key=lambda rec: rec.path)
                c = http.client.HTTPConnection("127.0.0.1", gh.port, timeout=10)
                out = {}
                for path in order:
                    c.request("GET", path)
                    r = c.getresponse()
                    r.read()
                    out.setdefault(path, []).append(r.status)
                c.close()
                return out
            finally:
                gh.stop()

        paths = ["/k/%d" % i for i in range(20)]
        forward = statuses([p for _ in range(10) for p in paths])
        backward = statuses([p for p in reversed(paths) for _ in range(10)])
        self.assertEqual(forward, backward)
        fails = sum(v.count(502) for v in forward.values())
        self.assertTrue(30 <= fails <= 90, fails)

    def test_drop_fault_closes_without_answer(self):
        self.gh.fault_drop("/x", count=1)
        with self.assertRaises((http.client.HTTPException, ConnectionError)):
            self.call("GET", "/x")
        self.assertEqual(self.call("GET", "/x")[0], 404)


class FakeGitHubChecksAndContentsTest(FakeGitHubTestBase):
    def setUp(self):
        super().setUp()
        self.tok = self.token_for("org1/repo1")
        self.auth = {"Authorization": "Bearer " + self.tok}

    def test_check_runs_get_increasing_ids_above_2_pow_32(self):
        ids = []
        for i in range(3):
            st, _, body = self.call("POST", "/repos/org1/repo1/check-runs",
                                    {"name": "crcr/a/b/c%d" % i, "head_sha": "abc",
                                     "status": "in_progress", "external_id": "1:2"}, self.auth)
            self.assertEqual(st, 201, body)
            run = json.loads(body)
            self.assertEqual(run["name"], "crcr/a/b/c%d" % i)
            self.assertEqual(run["external_id"], "1:2")
            ids.append(run["id"])
        self.assertGreater(ids[0], 2**32)
        self.assertEqual(ids, sorted(set(ids)))
        st, _, _ = self.call("POST", "/repos/org1/repo1/check-runs", {"head_sha": "abc"},
                             self.auth)
        self.assertEqual(st, 422)
        st, _, _ = self.call("POST", "/repos/org1/repo1/check-runs",
                             {"name": "n", "head_sha": "abc", "status": "completed"}, self.auth)
        self.assertEqual(st, 422)  # completed needs a conclusion
        st, _, _ = self.call("POST", "/repos/org1/repo1/check-runs",
                             {"name": "n", "head_sha": "abc"})
        self.assertEqual(st, 401)
        self.assertEqual(len(self.gh.check_runs()), 3)
        self.assertEqual(self.gh.check_runs()[0]["repo"], "org1/repo1")

    def test_suite_check_runs_are_paginated(self):
        self.gh.set_suite_check_runs(9001, [{"name": "crcr/x/y/%d" % i, "external_id": "%d:1" % i}
                                            for i in range(250)])
        sizes = []
        for page in (1, 2, 3, 4):
            st, _, body = self.call(
                "GET", "/repos/org1/repo1/check-suites/9001/check-runs?per_page=100&page=%d" % page,
                headers=self.auth)
            self.assertEqual(st, 200)
            data = json.loads(body)
            self.assertEqual(data["total_count"], 250)
            sizes.append(len(data["check_runs"]))
            if page == 3:
                self.assertEqual(data["check_runs"][-1]["name"], "crcr/x/y/249")
        self.assertEqual(sizes, [100, 100, 50, 0])
        st, _, body = self.call("GET", "/repos/org1/repo1/check-suites/9001/check-runs",
                                headers=self.auth)
        self.assertEqual(len(json.loads(body)["check_runs"]), 30)  # GitHub's default per_page

    def test_reruns_and_already_running(self):
        st, _, _ = self.call("POST", "/repos/org1/repo1/actions/runs/111/rerun-failed-jobs",
                             headers=self.auth)
        self.assertEqual(st, 201)
        self.gh.set_already_running(222)
        st, _, body = self.call("POST", "/repos/org1/repo1/actions/runs/222/rerun",
                                headers=self.auth)
        self.assertEqual(st, 403)
        self.assertIn("already running", json.loads(body)["message"])
        self.assertEqual(self.gh.reruns(), [{"repo": "org1/repo1", "run_id": 111,
                                             "kind": "rerun-failed-jobs"}])
        st, _, _ = self.call("POST", "/repos/org1/repo1/actions/runs/111/rerun")
        self.assertEqual(st, 401)

    def test_contents_base64_etag_and_304(self):
        text = "L1:\n  - org1/repo1\n" + "# padding line to exceed sixty characters\n" * 5
        self.gh.set_file("pytorch/pytorch", ".github/allowlist.yml", "main", text)
        path = "/repos/pytorch/pytorch/contents/.github/allowlist.yml?ref=main"
        st, h, body = self.call("GET", path)
        self.assertEqual(st, 200)
        doc = json.loads(body)
        self.assertEqual((doc["type"], doc["encoding"]), ("file", "base64"))
        lines = doc["content"].split("\n")
        self.assertTrue(all(len(l) <= 60 for l in lines))
        self.assertGreater(len(lines), 2)
        self.assertEqual(base64.b64decode(doc["content"]).decode(), text)
        etag = h["etag"]
        self.assertRegex(etag, r'^"[0-9a-f]{64}"$')
        st, h2, body = self.call("GET", path, headers={"If-None-Match": etag})
        self.assertEqual((st, body), (304, b""))
        self.assertEqual(h2["etag"], etag)
        self.gh.set_file("pytorch/pytorch", ".github/allowlist.yml", "main", text + "L2: []\n")
        st, h3, _ = self.call("GET", path, headers={"If-None-Match": etag})
        self.assertEqual(st, 200)
        self.assertNotEqual(h3["etag"], etag)
        self.assertEqual(self.call("GET", path.replace("ref=main", "ref=other"))[0], 404)
        self.assertEqual(self.call("GET", "/repos/pytorch/pytorch/contents/nope.yml")[0], 404)
        # Default ref is main.
        self.assertEqual(self.call("GET", path.split("?")[0])[0], 200)


class FakeGitHubCommentsAndHoldsTest(FakeGitHubTestBase):
    def setUp(self):
        super().setUp()
        self.auth = {"Authorization": "Bearer " + self.token_for("org1/repo1")}
        self.path = "/repos/org1/repo1/issues/77/comments"

    def test_comments_are_created_listed_and_paginated_like_github(self):
        seeded = self.gh.add_comment("org1/repo1", 77, "<!-- crcr-oncall:a/b -->\nold")
        self.assertEqual((seeded["user"]["login"], seeded["user"]["type"]),
                         ("pytorch-bot[bot]", "Bot"))
        self.assertIsNone(seeded["performed_via_github_app"])
        for i in range(4):
            st, _, body = self.call("POST", self.path, {"body": "c%d" % i}, self.auth)
            self.assertEqual(st, 201, body)
            c = json.loads(body)
            self.assertEqual((c["body"], c["user"]["login"]), ("c%d" % i, "crcr-test[bot]"))
            self.assertGreater(c["id"], 2**32)
        self.assertEqual([c["body"] for c in self.gh.comments("ORG1/repo1", 77)],
                         ["<!-- crcr-oncall:a/b -->\nold", "c0", "c1", "c2", "c3"])
        self.assertEqual(self.gh.comments("org1/repo1", 78), [])
        st, h, body = self.call("GET", self.path + "?per_page=2&page=1", headers=self.auth)
        self.assertEqual(st, 200)
        self.assertEqual(len(json.loads(body)), 2)
        self.assertIn('page=2>; rel="next"', h["link"])
        self.assertIn('page=3>; rel="last"', h["link"])
        st, h, body = self.call("GET", self.path + "?per_page=2&page=3", headers=self.auth)
        self.assertEqual([c["body"] for c in json.loads(body)], ["c3"])
        self.assertNotIn("link", h)
        st, _, body = self.call("GET", self.path, headers=self.auth)
        self.assertEqual(len(json.loads(body)), 5)  # default per_page 30
        # GitHub's validation and authentication.
        for bad in ({}, {"body": ""}, {"body": 5}, {"body": "x" * 65537}):
            self.assertEqual(self.call("POST", self.path, bad, self.auth)[0], 422)
        self.assertEqual(self.call("POST", self.path, b"{", self.auth)[0], 400)
        self.assertEqual(self.call("POST", self.path, {"body": "x"})[0], 401)
        self.assertEqual(self.call("GET", self.path)[0], 401)
        self.assertEqual(len(self.gh.comments("org1/repo1", 77)), 5)
        self.assertEqual(len(self.gh.wait_comments("org1/repo1", 77, 5, timeout=0)), 5)

    def _call_in_thread(self, *args):
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", self.call(*args)), daemon=True)
        t.start()
        return t, out

    def test_hold_after_applies_the_effect_then_waits_for_the_release(self):
        hold = self.gh.hold("POST", r"/issues/\d+/comments$")
        t, out = self._call_in_thread("POST", self.path, {"body": "held"}, self.auth)
        self.assertTrue(hold.wait_reached(10))
        self.assertEqual([c["body"] for c in self.gh.comments("org1/repo1", 77)], ["held"])
        t.join(0.2)
        self.assertTrue(t.is_alive(), "answered before the release")
        self.assertIsNone(hold.held[0].status)
        hold.release()
        t.join(10)
        self.assertEqual(out["r"][0], 201)
        # count=1: the next request is not held.
        self.assertEqual(self.call("POST", self.path, {"body": "free"}, self.auth)[0], 201)

    def test_hold_before_does_nothing_until_the_release(self):
        hold = self.gh.hold("POST", r"/issues/\d+/comments$", after=False)
        t, out = self._call_in_thread("POST", self.path, {"body": "later"}, self.auth)
        self.assertTrue(hold.wait_reached(10))
        self.assertEqual(self.gh.comments("org1/repo1", 77), [])
        hold.release()
        t.join(10)
        self.assertEqual(out["r"][0], 201)
        self.assertEqual(len(self.gh.comments("org1/repo1", 77)), 1)

    def test_a_held_client_that_went_away_does_not_break_the_fake(self):
        hold = self.gh.hold("GET", r"/comments$")
        sock = socket.create_connection(("127.0.0.1", self.gh.port))
        sock.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n\r\n"
                      % (self.path, self.auth["Authorization"])).encode())
        self.assertTrue(hold.wait_reached(10))
        sock.close()
        hold.release()
        self.assertEqual(self.call("GET", self.path, headers=self.auth)[0], 200)


class _Receiver:
    """A webhook receiver on loopback that answers each POST with the next status of `statuses`
    (then 202) and records (headers, body)."""

    def __init__(self, statuses=()):
        import http.server
        outer = self
        self.statuses = list(statuses)
        self.got = []

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                outer.got.append(({k.lower(): v for k, v in self.headers.items()},
                                  self.rfile.read(n)))
                st = outer.statuses.pop(0) if outer.statuses else 202
                self.send_response(st)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d/github/webhook" % self.srv.server_address[1]

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


class FakeGitHubHookDeliveriesTest(FakeGitHubTestBase):
    def test_sent_webhooks_are_signed_like_hookshot_and_recorded_with_their_outcome(self):
        rx = _Receiver([202, 503])
        self.addCleanup(rx.close)
        self.gh.hook_target(rx.url, "s3cret")
        ok = self.gh.send_webhook("pull_request", {"action": "opened", "number": 1})
        bad = self.gh.send_webhook("push", {"ref": "refs/heads/main"})
        self.assertEqual((ok["status_code"], ok["status"], ok["action"]), (202, "OK", "opened"))
        self.assertEqual((bad["status_code"], bad["status"]),
                         (503, "Invalid HTTP Response: 503"))
        self.assertGreater(bad["id"], ok["id"])
        self.assertGreater(ok["id"], 2**32)
        headers, body = rx.got[0]
        self.assertEqual(headers["x-github-event"], "pull_request")
        self.assertEqual(headers["x-github-delivery"], ok["guid"])
        self.assertTrue(headers["user-agent"].startswith("GitHub-Hookshot/"))
        self.assertEqual(headers["x-github-hook-installation-target-type"], "integration")
        self.assertEqual(headers["x-hub-signature-256"], relay.sign(body, "s3cret"))
        # Nobody listening: status_code 0, "failed to connect".
        rx.close()
        down = self.gh.send_webhook("push", {"ref": "refs/heads/x"})
        self.assertEqual((down["status_code"], down["status"]), (0, "failed to connect"))

    def test_the_log_pages_newest_first_by_link_cursor_and_needs_the_app_jwt(self):
        self.gh.hook_target("http://127.0.0.1:1/github/webhook", "s")
        sent = [self.gh.send_webhook("push", {"n": i}) for i in range(7)]
        st, _, _ = self.call("GET", "/app/hook/deliveries")
        self.assertEqual(st, 401)
        path, seen, pages = "/app/hook/deliveries?per_page=3", [], 0
        while path:
            st, hdrs, body = self.call("GET", path, headers=self.jwt_headers())
            self.assertEqual(st, 200, body)
            seen += [d["id"] for d in json.loads(body)]
            pages += 1
            m = re.search(r'<([^>]*)>; rel="next"', hdrs.get("link", ""))
            path = m.group(1)[len(self.gh.url):] if m else None
            if path:
                self.assertRegex(path, r"[?&]cursor=v1_\d+")
        self.assertEqual(pages, 3)
        self.assertEqual(seen, [a["id"] for a in reversed(sent)])
        # status=failure leaves status_code 0 out, as GitHub's filter does.
        st, _, body = self.call("GET", "/app/hook/deliveries?status=failure",
                                headers=self.jwt_headers())
        self.assertEqual(json.loads(body), [])

    def test_redelivery_keeps_the_guid_and_a_fault_keeps_it_failing(self):
        rx = _Receiver([500])
        self.addCleanup(rx.close)
        self.gh.hook_target(rx.url, "s")
        first = self.gh.send_webhook("push", {"ref": "refs/heads/main"})
        st, _, body = self.call("POST", "/app/hook/deliveries/%d/attempts" % first["id"],
                                headers=self.jwt_headers())
        self.assertEqual((st, json.loads(body)), (202, {}))
        again = self.gh.wait_hook_attempts(1, guid=first["guid"], redelivery=True)
        self.assertEqual(len(again), 1)
        self.assertEqual((again[0]["status_code"], again[0]["guid"]), (202, first["guid"]))
        self.assertEqual(rx.got[1][0]["x-github-delivery"], first["guid"])
        st, _, body = self.call("GET", "/app/hook/deliveries/%d" % again[0]["id"],
                                headers=self.jwt_headers())
        doc = json.loads(body)
        self.assertTrue(doc["redelivery"])
        self.assertEqual(doc["request"]["payload"], {"ref": "refs/heads/main"})
        self.gh.fail_redelivery(first["guid"])
        self.call("POST", "/app/hook/deliveries/%d/attempts" % first["id"],
                  headers=self.jwt_headers())
        third = self.gh.wait_hook_attempts(2, guid=first["guid"], redelivery=True)
        self.assertEqual(third[-1]["status_code"], 0)
        self.assertEqual(len(rx.got), 2)
        st, _, _ = self.call("POST", "/app/hook/deliveries/1/attempts",
                             headers=self.jwt_headers())
        self.assertEqual(st, 404)


if __name__ == "__main__":
    unittest.main()
