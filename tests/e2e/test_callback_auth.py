"""End-to-end authentication of callbacks: OIDC tokens and relay-signed callback tokens.

The real relay verifies the downstream's GitHub Actions ID token against a loopback issuer
(tests/support/oidc_issuer.py, CRCR_OIDC_ISSUERS=<its url>) and the callback_token it put into
every dispatch (spec §3.6). Covered:
  - upstream reference §3.10 1-7 and 25-28 (GitHub issuer), black-box;
  - forged tokens: signed by a key not in the JWKS, alg none, HS256 keyed with the public key,
    expired, not yet valid, wrong audience, unknown issuer, no repository claim, edited claims;
    the 60 s leeway on exp/nbf/iat; Bearer prefix handling; reasons never carry the token;
  - JWKS: cached (one fetch for many tokens and kids), invented kids do not make the relay hammer
    the issuer, an unreachable JWKS fails closed;
  - callback_token: a repo replaying another repo's payload, or changing the echoed delivery id,
    PR number or head sha, is refused 403 (and nothing is recorded); optional vs required mode;
    tokens made with GITHUB_APP_SECRET_PREVIOUS pass during rotation.
Harness: test_callback.py. Needs CRCR_BIN; see tests/support/README.md.
"""

import json
import secrets
import unittest

import oidc_issuer as O
import relay as R
import rsa_pure
from test_callback import L1, L2, L3, L4, CallbackMixin, new_sha

INVALID = "Invalid authorization token"
FORGED_REASONS = {
    "wrong_key": INVALID,
    "unknown_kid": INVALID,
    "alg_none": INVALID,
    "hs256_pubkey": INVALID,
    "expired": "Token expired",
    "not_yet_valid": "Token not yet valid",
    "wrong_aud": "Invalid audience",
    "no_repository": "GitHub OIDC token missing 'repository' claim",
    "unknown_iss": "Unsupported OIDC issuer: https://token.actions.example.invalid",
    "tampered": INVALID,
}
TOKEN_MISMATCH = ("callback_token does not match this repository, delivery, pull request and "
                  "head sha")


class OidcTokenTest(CallbackMixin, unittest.TestCase):
    """Forged and edge-case tokens against one relay (reference §3.10 1-6, 25, 26)."""

    def test_forged_tokens_are_401_with_their_reason_and_record_nothing(self):
        self.assertEqual(set(FORGED_REASONS), set(O.FORGERIES))
        pr = self.open_pr(repos=[L4])
        body = self.body(pr.cp(L4), "in_progress")
        sent = []
        for kind, reason in sorted(FORGED_REASONS.items()):
            with self.subTest(forgery=kind):
                tok = self.s.issuer.forged(kind, L4)
                sent.append(tok)
                r = self.post_callback(L4, body, token=tok)
                self.assertDetail(r, 401, reason)
                self.assertNotIn(tok.split(".")[1].encode(), r.body)
        self.assertEqual(self.outbox(pr.delivery), [r for r in self.outbox(pr.delivery)
                                                    if r["kind"] == "dispatch"])
        # None of them moved the state: the genuine in_progress is the first, not a duplicate.
        self.assertOk(self.post_callback(L4, body), "in_progress")
        # No token (nor its signature) is ever logged.
        log = self.s.relay.log_text()
        for tok in sent + [self.s.issuer.token(L4)]:
            for part in tok.split("."):
                if len(part) > 16:
                    self.assertNotIn(part, log, "a token part was logged")

    def test_other_algorithms_and_malformed_tokens_are_401(self):
        pr = self.open_pr(repos=[L2])
        body = self.body(pr.cp(L2), "in_progress")
        iss = self.s.issuer
        claims = iss.claims(L2)
        good = iss.token(L2)
        h, c, signing_input, sig = rsa_pure.decode_jwt(good)
        variants = {
            # RS256 signature, header claims another algorithm
            "alg RS512": rsa_pure.make_jwt(claims, key=iss.private_key("k1"), kid="k1",
                                           header={"alg": "RS512"}),
            "alg rs256": rsa_pure.make_jwt(claims, key=iss.private_key("k1"), kid="k1",
                                           header={"alg": "rs256"}),
            "alg ES256": rsa_pure.make_jwt(claims, key=iss.private_key("k1"), kid="k1",
                                           header={"alg": "ES256"}),
            "alg none, signature kept": rsa_pure.make_jwt(
                claims, alg="none", kid="k1").rstrip(".") + "." + good.split(".")[2],
            "two parts": ".".join(good.split(".")[:2]),
            "four parts": good + ".x",
            "not base64": "!!!." + good.split(".", 1)[1],
            "signature cut": good[:-10],
            "empty signature": good.rsplit(".", 1)[0] + ".",
            "some.oidc.token": "some.oidc.token",
            "huge": "a" * 20000,
        }
        for what, tok in variants.items():
            with self.subTest(token=what):
                self.assertDetail(self.post_callback(L2, body, token=tok), 401, INVALID)
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])

    def test_3_10_1_and_3_valid_token_and_bearer_prefix_forms(self):
        pr = self.open_pr(repos=[L2])
        iss = self.s.issuer
        forms = [
            ("Bearer %s", "build-1"), ("bearer %s", "build-2"), ("BEARER   %s  ", "build-3"),
            ("  Bearer %s", "build-4"), ("%s", "build-5"),
        ]
        for fmt, job in forms:
            with self.subTest(form=fmt):
                r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress", job_name=job),
                                       token="", headers={"Authorization": fmt % iss.token(L2)})
                self.assertOk(r, "in_progress")
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress", job_name="basic"),
                               token="", headers={"Authorization": "Basic " + iss.token(L2)})
        self.assertDetail(r, 401)

    def test_3_10_2_audience_must_match_exactly_or_be_in_the_list(self):
        pr = self.open_pr(repos=[L2])
        iss = self.s.issuer
        cases = [
            (O.AUDIENCE, True), ([O.AUDIENCE], True), (["other", O.AUDIENCE], True),
            (O.AUDIENCE + "x", False), (O.AUDIENCE.upper(), False), ("", False),
            (["other"], False), ([], False), (5, False),
        ]
        for i, (aud, ok) in enumerate(cases):
            with self.subTest(aud=aud):
                r = self.post_callback(
                    L2, self.body(pr.cp(L2), "in_progress", job_name="aud-%d" % i),
                    token=iss.token(L2, aud=aud))
                if ok:
                    self.assertOk(r, "in_progress")
                else:
                    self.assertDetail(r, 401, "Invalid audience")
        self.assertDetail(self.post_callback(L2, self.body(pr.cp(L2), "in_progress"),
                                             token=iss.token(L2, aud=None)), 401)

    def test_3_10_4_empty_authorization_is_401_missing(self):
        pr = self.open_pr(repos=[L2])
        for value in ("", "Bearer", "Bearer    ", "   "):
            with self.subTest(header=value):
                r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress"), token="",
                                       headers={"Authorization": value})
                self.assertDetail(r, 401, contains="Missing")

    def test_3_10_6_repository_claim_required_and_well_formed(self):
        pr = self.open_pr(repos=[L2])
        body = self.body(pr.cp(L2), "in_progress")
        iss = self.s.issuer
        for repo in (None, "", "noslash", "a/b/c", "/repo", "org/", 42, ["org2/repo2"],
                     "org2/repo2\n"):
            with self.subTest(repository=repo):
                self.assertDetail(self.post_callback(L2, body,
                                                     token=iss.token(L2, repository=repo)),
                                  401, "GitHub OIDC token missing 'repository' claim")

    def test_the_repository_claim_is_the_identity_not_the_body(self):
        # A token for the L1 repo with the L2 repo's payload is judged as the L1 repo: ignored.
        pr = self.open_pr(repos=[L2])
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress"),
                               token=self.s.issuer.token(L1))
        self.assertEqual(json.loads(r.body), {"ok": True, "status": "ignored"})
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])

    def test_time_claims_have_60_s_leeway(self):
        pr = self.open_pr(repos=[L2])
        iss = self.s.issuer
        now = int(iss.now())  # the stack's clock: the relay's
        cases = [
            ("exp 30 s ago", dict(exp=now - 30), None),
            ("exp 120 s ago", dict(exp=now - 120), "Token expired"),
            ("nbf in 30 s", dict(nbf=now + 30), None),
            ("nbf in 120 s", dict(nbf=now + 120), "Token not yet valid"),
            ("iat in 30 s", dict(iat=now + 30), None),
            ("iat in 120 s", dict(iat=now + 120), "Token issued in the future"),
            ("no exp", dict(exp=None), INVALID),
            ("exp not a number", dict(exp="soon"), INVALID),
            ("no nbf, no iat", dict(nbf=None, iat=None), None),
        ]
        for i, (what, claims, reason) in enumerate(cases):
            with self.subTest(case=what):
                r = self.post_callback(
                    L2, self.body(pr.cp(L2), "in_progress", job_name="t%d" % i),
                    token=iss.token(L2, **claims))
                if reason is None:
                    self.assertOk(r, "in_progress")
                else:
                    self.assertDetail(r, 401, reason)

    def test_3_10_25_26_unknown_or_missing_issuer_is_401(self):
        pr = self.open_pr(repos=[L2])
        body = self.body(pr.cp(L2), "in_progress")
        iss = self.s.issuer
        for claim, reason in (
                ("https://token.actions.githubusercontent.com",
                 "Unsupported OIDC issuer: https://token.actions.githubusercontent.com"),
                (iss.url + "/other", "Unsupported OIDC issuer: %s/other" % iss.url),
                (iss.url.replace("127.0.0.1", "localhost"),
                 "Unsupported OIDC issuer: %s" % iss.url.replace("127.0.0.1", "localhost")),
                (None, INVALID), (7, INVALID)):
            with self.subTest(iss=claim):
                self.assertDetail(self.post_callback(L2, body, token=iss.token(L2, iss=claim)),
                                  401, reason)
        # A trailing slash names the same issuer.
        self.assertOk(self.post_callback(L2, body, token=iss.token(L2, iss=iss.url + "/")),
                      "in_progress")

    def test_jwks_is_fetched_once_for_many_tokens_and_invented_kids_cause_no_refetch(self):
        self.own_stack(issuer_keys={"k1": R.OIDC_KEY, "k2": R.APP_KEY})
        pr = self.open_pr(repos=[L2])
        iss = self.s.issuer
        for i, kid in enumerate(["k1", "k2", "k1", "k2"]):
            self.assertOk(self.post_callback(
                L2, self.body(pr.cp(L2), "in_progress", job_name="kid-%d" % i),
                token=iss.token(L2, kid=kid)), "in_progress")
        # No kid at all: every cached key is tried.
        notkid = rsa_pure.make_jwt(iss.claims(L2), key=iss.private_key("k2"))
        self.assertOk(self.post_callback(
            L2, self.body(pr.cp(L2), "in_progress", job_name="no-kid"), token=notkid),
            "in_progress")
        self.assertEqual(len(iss.jwks_fetches()), 1, "the JWKS was not cached")
        # A flood of unknown kids (a key rotation the relay cannot know yet, or an attack):
        # refused, and at most one refetch per minute - here none, the last fetch is recent.
        for i in range(15):
            tok = iss.sign(iss.claims(L2), kid="rotated-%d" % i, key=iss.foreign_key)
            self.assertDetail(self.post_callback(L2, self.body(pr.cp(L2), "in_progress"),
                                                 token=tok), 401, INVALID)
        self.assertEqual(len(iss.jwks_fetches()), 1, "invented kids made the relay refetch")

    def test_3_10_5_unreachable_jwks_is_503_with_retry_after_and_stores_nothing(self):
        # Upstream answers 401 "Invalid authorization token" and its action does not retry a 401:
        # the report was lost for a token that was fine. crcr cannot judge the token without the
        # issuer's keys: 503, the issuer named, Retry-After; nothing stored (still fails closed).
        self.own_stack()
        pr = self.open_pr(repos=[L2])
        self.s.issuer.fail_jwks(503)
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress"))
        self.assertDetail(r, 503, "the relay cannot get the signing keys of OIDC issuer %s "
                                  "(HTTP status 503); the token was not judged, please retry"
                          % self.s.issuer.url)
        self.assertIn(r.headers.get("retry-after"), [str(n) for n in range(1, 6)])
        self.assertGreaterEqual(len(self.s.issuer.jwks_fetches()), 1)
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])
        doc = self.s.relay.get("/api/v1/pr/%d" % pr.number).json()
        self.assertEqual([s["runs"] for s in doc["shas"]], [[]])
        # The failed fetch counts against the retry interval: a second token right away does not
        # make the relay ask the issuer again.
        n = len(self.s.issuer.jwks_fetches())
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress"))
        self.assertEqual(r.status, 503, r.body)
        self.assertEqual(len(self.s.issuer.jwks_fetches()), n)
        # Counted in /metrics, per issuer, and as callbacks answered "unavailable".
        text = self.s.relay.get("/metrics").body.decode()
        self.assertIn('crcr_oidc_keys_unavailable_total{issuer="%s"} 2' % self.s.issuer.url, text)
        self.assertIn('crcr_oidc_jwks_failing{issuer="%s"} 1' % self.s.issuer.url, text)
        self.assertIn('crcr_callbacks_total{result="unavailable"} 2', text)
        # The issuer answers again: once the retry interval has passed on the relay's clock, the
        # same report is taken.
        self.s.issuer.fail_jwks(None)
        self.s.relay.clock.advance(5)
        self.assertOk(self.post_callback(L2, self.body(pr.cp(L2), "in_progress")), "in_progress")
        text = self.s.relay.get("/metrics").body.decode()
        self.assertIn('crcr_oidc_jwks_failing{issuer="%s"} 0' % self.s.issuer.url, text)

    def test_a_bad_token_stays_401_while_the_issuer_is_down(self):
        # Keys the relay has judge a token: a forgery under a known kid is 401 during an outage.
        self.own_stack()
        pr = self.open_pr(repos=[L2])
        self.assertOk(self.post_callback(L2, self.body(pr.cp(L2), "in_progress", job_name="a")),
                      "in_progress")
        self.s.issuer.fail_jwks(500)
        # An hour later the cached keys are old: a refresh is tried and fails, the keys stay.
        clock = self.s.relay.clock
        clock.advance(3600)
        n = len(self.s.issuer.jwks_fetches())
        issuer = self.s.issuer
        forged = issuer.sign(issuer.claims(L2, now=clock.now()), key=issuer.foreign_key)
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress", job_name="b"),
                               token=forged)
        self.assertDetail(r, 401, INVALID)
        self.assertEqual(len(issuer.jwks_fetches()), n + 1)  # the refresh was tried
        good = issuer.token(L2, now=clock.now())
        self.assertOk(self.post_callback(L2, self.body(pr.cp(L2), "in_progress", job_name="c"),
                                         token=good), "in_progress")


class IssuerConfigTest(CallbackMixin, unittest.TestCase):
    """Several configured issuers, a rogue one, a custom audience (reference §3.10 7, 27, 28)."""

    STACK_ENV = {"CRCR_OIDC_AUDIENCE": "crcr-e2e-audience"}
    STACK_KW = {"extra_issuers": 1}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.rogue = O.OIDCIssuer(keys={"r1": R.APP_KEY}).start()
        cls.addClassCleanup(cls.rogue.stop)

    def test_3_10_27_every_configured_issuer_is_trusted(self):
        pr = self.open_pr(repos=[L2])
        a, b = self.s.issuer, self.s.extra_issuers[0]
        for n, iss in enumerate((a, b)):
            with self.subTest(issuer=iss.url):
                tok = iss.token(L2, aud="crcr-e2e-audience")
                r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress",
                                                     job_name="iss-%d" % n), token=tok)
                self.assertOk(r, "in_progress")

    def test_3_10_7_token_signed_by_one_issuer_claiming_another_is_401(self):
        pr = self.open_pr(repos=[L2])
        a, b = self.s.issuer, self.s.extra_issuers[0]
        body = self.body(pr.cp(L2), "in_progress")
        # a's key and kid, b's iss; and the other way round
        t1 = a.sign(b.claims(L2, aud="crcr-e2e-audience"), kid="k1")
        t2 = b.sign(a.claims(L2, aud="crcr-e2e-audience"), kid="x0")
        for tok in (t1, t2):
            self.assertDetail(self.post_callback(L2, body, token=tok), 401, INVALID)
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])

    def test_3_10_28_a_rogue_issuer_is_never_contacted(self):
        pr = self.open_pr(repos=[L2])
        tok = self.rogue.token(L2, aud="crcr-e2e-audience")
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress"), token=tok)
        self.assertDetail(r, 401, "Unsupported OIDC issuer: %s" % self.rogue.url)
        self.assertEqual(self.rogue.jwks_fetches(), [])

    def test_configured_audience_replaces_the_default(self):
        pr = self.open_pr(repos=[L2])
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress", job_name="aud"),
                               token=self.s.issuer.token(L2))  # default audience
        self.assertDetail(r, 401, "Invalid audience")
        r = self.post_callback(L2, self.body(pr.cp(L2), "in_progress", job_name="aud"),
                               token=self.s.issuer.token(L2, aud="crcr-e2e-audience"))
        self.assertOk(r, "in_progress")


class CallbackTokenTest(CallbackMixin, unittest.TestCase):
    """The relay-signed callback_token (spec §3.6), compatibility mode (the default)."""

    def assertRefused(self, repo, body, pr):
        r = self.post_callback(repo, body)
        self.assertDetail(r, 403, TOKEN_MISMATCH)
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])
        self.assertEqual(self.outbox(pr.delivery, "check_run"), [])

    def test_every_dispatch_carries_a_token_bound_to_its_repo(self):
        pr = self.open_pr()
        tokens = {repo: cp.get("callback_token") for repo, cp in pr.payloads.items()}
        for repo, tok in tokens.items():
            self.assertRegex(tok or "", r"^v1\.[0-9a-f]{64}$", repo)
        self.assertEqual(len(set(tokens.values())), len(tokens), "two repos share a token")

    def test_replaying_another_repos_payload_is_403(self):
        pr = self.open_pr(repos=[L2, L4])
        # The L2 repo (valid OIDC identity) echoes what was dispatched to the L4 repo.
        self.assertRefused(L2, self.body(pr.cp(L4), "in_progress"), pr)
        # ...and as completed, where a wrong token must not even reach the state machine.
        self.assertRefused(L2, self.body(pr.cp(L4), "completed"), pr)
        # The owner of the token is not affected.
        self.assertOk(self.cb(L4, pr, "in_progress"), "in_progress")

    def test_replaying_own_token_under_another_delivery_is_403(self):
        pr1 = self.open_pr(repos=[L2])
        pr2 = self.open_pr(repos=[L2])
        b = self.body(pr1.cp(L2), "in_progress")
        b["delivery_id"] = pr2.delivery
        self.assertRefused(L2, b, pr2)
        self.assertEqual(self.outbox(pr1.delivery, "hud_forward"), [])

    def test_changing_the_echoed_pr_number_or_head_sha_is_403(self):
        pr = self.open_pr(repos=[L4])
        edits = {
            "pr number": lambda p: p["pull_request"].__setitem__("number", pr.number + 1),
            "head sha": lambda p: p["pull_request"]["head"].__setitem__("sha", new_sha()),
            "head sha upper-case": lambda p: p["pull_request"]["head"].__setitem__(
                "sha", pr.sha.upper()),
            "no pull_request": lambda p: p.pop("pull_request"),
        }
        for what, edit in edits.items():
            with self.subTest(edit=what):
                b = self.body(pr.cp(L4), "in_progress")
                edit(b["payload"])
                self.assertRefused(L4, b, pr)
        self.assertOk(self.cb(L4, pr, "in_progress"), "in_progress")

    def test_malformed_tokens_are_403(self):
        pr = self.open_pr(repos=[L2])
        good = pr.cp(L2)["callback_token"]
        for tok in ("", "v1.", "v1." + "0" * 64, "v2." + good[3:], good.upper(), good[:-1],
                    good + "0", " " + good):
            with self.subTest(token=tok[:12]):
                b = self.body(pr.cp(L2), "in_progress")
                b["callback_token"] = tok
                self.assertRefused(L2, b, pr)
        # A token that is not a string is treated as absent (optional mode): accepted.
        b = self.body(pr.cp(L2), "in_progress")
        b["callback_token"] = None
        self.assertOk(self.post_callback(L2, b), "in_progress")

    def test_missing_token_is_accepted_in_optional_mode(self):
        pr = self.open_pr(repos=[L2])
        b = self.body(pr.cp(L2), "in_progress")
        del b["callback_token"]
        self.assertOk(self.post_callback(L2, b), "in_progress")
        b = self.body(pr.cp(L2), "completed")
        del b["callback_token"]
        self.assertOk(self.post_callback(L2, b), "completed")
        # Logged, so that an operator finds who CRCR_CALLBACK_TOKEN=required would refuse.
        self.assertIn("event=callback.token_absent delivery=%s repo=%s" % (pr.delivery, L2),
                      self.s.relay.log_text())

    def test_push_dispatch_token_binds_the_after_sha(self):
        pr = self.push(repos=[L2])
        self.assertNotIn("pull_request", pr.cp(L2)["payload"])
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")
        b = self.body(pr.cp(L2), "completed")
        b["payload"]["after"] = new_sha()
        self.assertDetail(self.post_callback(L2, b), 403, TOKEN_MISMATCH)
        self.assertOk(self.cb(L2, pr, "completed"), "completed")


class CallbackTokenRequiredTest(CallbackMixin, unittest.TestCase):
    STACK_ENV = {"CRCR_CALLBACK_TOKEN": "required"}

    def test_missing_token_is_403_when_required(self):
        pr = self.open_pr(repos=[L3, L2])
        b = self.body(pr.cp(L3), "in_progress")
        del b["callback_token"]
        self.assertDetail(self.post_callback(L3, b), 403, "callback_token required")
        self.assertIn("event=callback.token_missing delivery=%s repo=%s" % (pr.delivery, L3),
                      self.s.relay.log_text())
        self.assertEqual(self.outbox(pr.delivery, "hud_forward"), [])
        b = self.body(pr.cp(L2), "in_progress")
        self.assertDetail(self.post_callback(L3, b), 403, TOKEN_MISMATCH)
        self.assertOk(self.cb(L3, pr, "in_progress"), "in_progress")
        self.assertOk(self.cb(L3, pr, "completed"), "completed")


class SecretRotationTest(CallbackMixin, unittest.TestCase):
    def test_tokens_signed_with_the_previous_secret_pass_during_rotation(self):
        pr = self.open_pr(repos=[L2])
        relay = self.s.relay
        old = relay.secret
        relay.secret = "rotated-secret-" + secrets.token_hex(8)
        relay.extra_env["GITHUB_APP_SECRET"] = relay.secret
        relay.extra_env["GITHUB_APP_SECRET_PREVIOUS"] = old
        relay.restart()
        self.assertOk(self.cb(L2, pr, "in_progress"), "in_progress")
        # After the rotation ends (previous secret dropped) the old token no longer matches.
        relay.extra_env["GITHUB_APP_SECRET_PREVIOUS"] = None
        relay.restart()
        self.assertDetail(self.cb(L2, pr, "completed"), 403, TOKEN_MISMATCH)
        b = self.body(pr.cp(L2), "completed")
        del b["callback_token"]
        self.assertOk(self.post_callback(L2, b), "completed")
        # Logged, so that an operator finds who CRCR_CALLBACK_TOKEN=required would refuse.
        self.assertIn("event=callback.token_absent delivery=%s repo=%s" % (pr.delivery, L2),
                      self.s.relay.log_text())


if __name__ == "__main__":
    unittest.main()
