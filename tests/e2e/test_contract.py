"""Self-tests of the contract check (tests/support/contract.py): GitHub's REST API description
(@octokit/openapi, pinned) against the requests the fake GitHub receives and the answers it
gives. Runs without the relay binary (like test_fakegh.py).

- The checker refuses deliberately wrong requests, each named with its operation and the schema
  path: a dispatch without event_type, an event_type that is not a string, a client_payload of
  11 keys (GitHub allows 10), an unknown path, a wrong query parameter type or name, a missing
  required body; and wrong answers: a check run without its required fields, a success status
  the operation never answers, a body on a 204. OpenAPI 3.0 `nullable` is honoured (a re-run's
  body may be null; a check run's conclusion may be null but not "sucess").
- Through the fake itself: stop() raises ContractViolation for a dispatch without event_type.
- Every route of the fake, asked correctly, answers what GitHub's description says (the fake
  cannot drift from GitHub), on api.github.com and on GitHub Enterprise Server 3.19 under
  /api/v3; on GHES a request outside /api/v3 is answered 404 and is a violation.
The first run downloads the pinned tarball (scripts/test.sh fetches it before the suites).
"""

import http.client
import json
import time
import unittest

import contract as C
import fakegh
import relay
import rsa_pure

APP_ID = 12345
DISPATCH = "/repos/{owner}/{repo}/dispatches"


def ex(method, path, body=b"", status=200, response=b"", query=None, headers=None,
       response_headers=None, injected=False, raw_path=None):
    if isinstance(body, (dict, list)) or body is None:
        body = json.dumps(body).encode()
    if isinstance(response, (dict, list)):
        response = json.dumps(response).encode()
        response_headers = response_headers or {"content-type": "application/json"}
    return C.Exchange(method=method, raw_path=raw_path or path, path=path, query=query or {},
                      headers=headers or {}, body=body, status=status,
                      response_headers=response_headers or {}, response=response,
                      injected=injected)


def problems(*exchanges, flavor="api.github.com"):
    return C.check(list(exchanges), flavor, tally=None)


class CheckerTest(unittest.TestCase):
    """contract.check() on hand-made exchanges."""

    def assertOneProblem(self, found, *parts):
        self.assertEqual(len(found), 1, found)
        for p in parts:
            self.assertIn(p, found[0])

    def test_a_good_dispatch_passes(self):
        body = {"event_type": "pull_request", "client_payload": {str(i): i for i in range(10)}}
        self.assertEqual(problems(ex("POST", "/repos/o/r/dispatches", body, 204)), [])

    def test_a_dispatch_without_event_type_fails_with_operation_and_schema_path(self):
        found = problems(ex("POST", "/repos/o/r/dispatches", {"client_payload": {}}, 204))
        self.assertOneProblem(found, "repos/create-dispatch-event", "POST " + DISPATCH,
                              "'event_type' is a required property",
                              "#/paths/~1repos~1{owner}~1{repo}~1dispatches/post/requestBody/"
                              "content/application~1json/schema/required")

    def test_wrong_types_and_too_many_client_payload_keys_fail(self):
        found = problems(ex("POST", "/repos/o/r/dispatches", {"event_type": 7}, 204))
        self.assertOneProblem(found, "request body .event_type", "is not of type 'string'",
                              "schema/properties/event_type/type")
        found = problems(ex("POST", "/repos/o/r/dispatches",
                            {"event_type": "x", "client_payload": {str(i): i for i in
                                                                   range(11)}}, 204))
        self.assertOneProblem(found, "request body .client_payload", "too many properties",
                              "properties/client_payload/maxProperties")
        found = problems(ex("POST", "/repos/o/r/dispatches", {"event_type": ""}, 204))
        self.assertOneProblem(found, "properties/event_type/minLength")

    def test_an_unknown_path_or_method_fails(self):
        self.assertOneProblem(problems(ex("POST", "/repos/o/r/dispatch", {}, 404)),
                              "POST /repos/o/r/dispatch: no such operation")
        self.assertOneProblem(problems(ex("DELETE", "/repos/o/r/dispatches", b"", 404)),
                              "no such operation")

    def test_query_parameters_are_checked(self):
        found = problems(ex("GET", "/repos/o/r/issues/5/comments", status=200, response=[],
                            query={"per_page": "many"}))
        self.assertOneProblem(found, "issues/list-comments", "query parameter per_page",
                              "'many' is not of type 'integer'")
        found = problems(ex("GET", "/repos/o/r/issues/5/comments", status=200, response=[],
                            query={"perpage": "100"}))
        self.assertOneProblem(found, "query parameter 'perpage' is not a parameter")
        self.assertEqual(problems(ex("GET", "/repos/o/r/issues/5/comments", status=200,
                                     response=[], query={"per_page": "100", "page": "2"})), [])

    def test_a_required_body_must_be_sent_and_json(self):
        self.assertOneProblem(problems(ex("POST", "/repos/o/r/check-runs", b"", 422,
                                          {"message": "x", "documentation_url": "d"})),
                              "checks/create", "requires a request body")
        self.assertOneProblem(problems(ex("POST", "/repos/o/r/dispatches", b"{nope", 400,
                                          {"message": "Problems parsing JSON"})),
                              "request body is not JSON")

    def test_answers_are_checked_against_the_status_codes_schema(self):
        body = {"name": "crcr/a/b", "head_sha": "a" * 40, "status": "in_progress"}
        found = problems(ex("POST", "/repos/o/r/check-runs", body, 201, {"id": 1}))
        self.assertTrue(found)
        self.assertTrue(all("answer 201 body" in p and "/responses/201/" in p for p in found),
                        found)
        self.assertOneProblem(problems(ex("POST", "/repos/o/r/dispatches",
                                          {"event_type": "x"}, 200, {})),
                              "the fake answered 200, which the operation never answers")
        self.assertOneProblem(problems(ex("POST", "/repos/o/r/dispatches", {"event_type": "x"},
                                          204, b"{}")), "answer 204 has a body of 2 bytes")
        # An error the operation does not list is checked against GitHub's Basic Error ...
        self.assertEqual(problems(ex("POST", "/repos/o/r/dispatches", {"event_type": "x"}, 401,
                                     {"message": "Bad credentials",
                                      "documentation_url": "https://docs.github.com/rest"})), [])
        self.assertOneProblem(problems(ex("POST", "/repos/o/r/dispatches", {"event_type": "x"},
                                          401, {"error": "no"})), "'message' is a required")
        # ... and an answer a test's fault rule wrote is not the fake's: only its request counts.
        self.assertEqual(problems(ex("POST", "/repos/o/r/dispatches", {"event_type": "x"}, 502,
                                     b"<html>", injected=True)), [])
        self.assertEqual(len(problems(ex("POST", "/repos/o/r/dispatches", {}, 502, b"",
                                         injected=True))), 1)

    def test_nullable_is_honoured(self):
        self.assertEqual(C.to_json_schema({"type": "string", "nullable": True,
                                           "enum": ["a"]}),
                         {"type": ["string", "null"], "enum": ["a", None]})
        self.assertEqual(C.to_json_schema({"allOf": [{"type": "object"}], "nullable": True}),
                         {"anyOf": [{"type": "null"}, {"allOf": [{"type": "object"}]}]})
        # actions/re-run-workflow's body is a nullable object.
        self.assertEqual(problems(ex("POST", "/repos/o/r/actions/runs/9/rerun", None, 201,
                                     {})), [])
        self.assertOneProblem(problems(ex("POST", "/repos/o/r/actions/runs/9/rerun", [], 201,
                                          {})), "is not of type 'object', 'null'")
        # A check run request's conclusion is an enum (not nullable there).
        body = {"name": "n", "head_sha": "a" * 40, "status": "completed", "conclusion": "sucess"}
        found = problems(ex("POST", "/repos/o/r/check-runs", body, 422,
                            {"message": "x", "documentation_url": "d"}))
        self.assertOneProblem(found, "request body .conclusion", "is not one of")

    def test_ghes_paths_outside_the_prefix_and_ghes_only_description(self):
        found = problems(C.Exchange(method="POST", raw_path="/repos/o/r/dispatches", path=None,
                                    query={}, headers={}, body=b"{}", status=404,
                                    response=b"", response_headers={}, injected=False),
                         flavor="ghes-3.19")
        self.assertOneProblem(found, "outside the API prefix '/api/v3' of ghes-3.19")
        self.assertEqual(C.spec("ghes-3.19").prefix, "/api/v3")
        self.assertEqual(C.spec("api.github.com").prefix, "")
        found = problems(ex("POST", "/repos/o/r/dispatches", {"client_payload": {}}, 204),
                         flavor="ghes-3.19")
        self.assertOneProblem(found, "repos/create-dispatch-event",
                              "'event_type' is a required property")

    def test_report_groups_the_same_problem(self):
        bad = ex("POST", "/repos/o/r/dispatches", {"client_payload": {}}, 204)
        found = problems(bad, bad, bad)
        self.assertEqual(len(found), 3)
        text = C.report(found, "api.github.com")
        self.assertIn("3 problem(s) (1 distinct)", text)
        self.assertIn("3x POST /repos/o/r/dispatches", text)


class FakeClient:
    """Valid requests to a FakeGitHub, as the relay would send them."""

    def __init__(self, gh):
        self.gh = gh
        self.key = rsa_pure.load_private_key(relay.APP_KEY)

    def call(self, method, path, body=None, headers=None, prefix=True):
        c = http.client.HTTPConnection("127.0.0.1", self.gh.port, timeout=10)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            c.request(method, (self.gh.api_prefix if prefix else "") + path, body=body,
                      headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def jwt(self):
        now = int(time.time())
        tok = rsa_pure.make_jwt({"iss": APP_ID, "iat": now - 60, "exp": now + 540}, self.key)
        return {"Authorization": "Bearer " + tok, "Accept": "application/vnd.github+json"}

    def token(self, repo):
        st, _, body = self.call("GET", "/repos/%s/installation" % repo, headers=self.jwt())
        assert st == 200, body
        st, _, body = self.call("POST", "/app/installations/%d/access_tokens"
                                % json.loads(body)["id"], headers=self.jwt())
        assert st == 201, body
        return {"Authorization": "token " + json.loads(body)["token"],
                "Accept": "application/vnd.github+json"}


class FakeConformanceTest(unittest.TestCase):
    """Every route of the fake, asked correctly, answers as GitHub's description says."""

    def exercise(self, flavor):
        gh = fakegh.FakeGitHub(APP_ID, relay.APP_PUB, flavor=flavor,
                               installed_repos={"org1/repo1", "pytorch/pytorch"}).start()
        gh.contract_tally = None  # not the relay's traffic: left out of the run's counts
        try:
            c = FakeClient(gh)
            self.assertEqual(c.call("GET", "/repos/org9/none/installation",
                                    headers=c.jwt())[0], 404)
            self.assertEqual(c.call("GET", "/repos/org1/repo1/installation")[0], 401)
            tok = c.token("org1/repo1")
            up = c.token("pytorch/pytorch")
            self.assertEqual(c.call("POST", "/repos/org1/repo1/dispatches",
                                    {"event_type": "pull_request",
                                     "client_payload": {"a": 1}}, tok)[0], 204)
            self.assertEqual(c.call("POST", "/repos/org1/repo1/dispatches",
                                    {"event_type": "push"},
                                    {"Authorization": "token ghs_unknown"})[0], 401)
            for body in ({"name": "crcr/org1/repo1/ci/build", "head_sha": "a" * 40,
                          "status": "in_progress", "external_id": "7:5",
                          "details_url": gh.web_url + "/org1/repo1/actions/runs/7",
                          "output": {"title": "In progress", "summary": "s"}},
                         {"name": "crcr/org1/repo1/ci/build", "head_sha": "a" * 40,
                          "status": "completed", "conclusion": "failure",
                          "completed_at": "2026-01-01T00:00:00Z",
                          "output": {"title": "Failure", "summary": "s"}}):
                st, _, answer = c.call("POST", "/repos/pytorch/pytorch/check-runs", body, up)
                self.assertEqual(st, 201, answer)
            run = json.loads(answer)
            gh.set_suite_check_runs(77, [dict(run), dict(run, id=run["id"] + 1)])
            st, _, _ = c.call("GET", "/repos/pytorch/pytorch/check-suites/77/check-runs"
                              "?per_page=1&page=2", headers=up)
            self.assertEqual(st, 200)
            self.assertEqual(c.call("POST", "/repos/org1/repo1/actions/runs/9/rerun",
                                    None, tok)[0], 201)
            self.assertEqual(c.call("POST", "/repos/org1/repo1/actions/runs/9/rerun-failed-jobs",
                                    None, tok)[0], 201)
            gh.set_already_running(10)
            self.assertEqual(c.call("POST", "/repos/org1/repo1/actions/runs/10/rerun",
                                    None, tok)[0], 403)
            gh.set_file("pytorch/pytorch", ".github/allowlist.yml", "main", "L1:\n  - a/b\n")
            st, hdrs, _ = c.call("GET", "/repos/pytorch/pytorch/contents/.github/allowlist.yml"
                                 "?ref=main", headers=up)
            self.assertEqual(st, 200)
            st, _, _ = c.call("GET", "/repos/pytorch/pytorch/contents/.github/allowlist.yml"
                              "?ref=main", headers=dict(up, **{"If-None-Match": hdrs["etag"]}))
            self.assertEqual(st, 304)
            st, _, _ = c.call("GET", "/repos/pytorch/pytorch/contents/.github/allowlist.yml"
                              "?ref=main", headers=dict(up, Accept="application/vnd.github.raw"))
            self.assertEqual(st, 200)
            self.assertEqual(c.call("GET", "/repos/pytorch/pytorch/contents/none.yml?ref=main",
                                    headers=up)[0], 404)
            gh.add_comment("pytorch/pytorch", 5, "<!-- crcr-oncall:org1/repo1 -->")
            for _ in range(2):
                self.assertEqual(c.call("POST", "/repos/pytorch/pytorch/issues/5/comments",
                                        {"body": "hello"}, up)[0], 201)
            st, hdrs, body = c.call("GET", "/repos/pytorch/pytorch/issues/5/comments"
                                    "?per_page=2&page=1", headers=up)
            self.assertEqual(st, 200)
            self.assertIn('rel="next"', hdrs["link"])
            self.assertIn(gh.url + "/repos/pytorch/pytorch/issues/5/comments", hdrs["link"])
            n = len(gh._exchanges)
        finally:
            gh.stop()  # raises ContractViolation on any drift from GitHub's description
        self.assertEqual(gh.contract_violations, [])
        return n

    def test_every_route_answers_as_github_does(self):
        self.assertGreaterEqual(self.exercise("api.github.com"), 20)

    def test_every_route_answers_as_github_enterprise_server_does(self):
        self.assertGreaterEqual(self.exercise("ghes-3.19"), 20)


class FakeViolationTest(unittest.TestCase):
    """The fake's stop() fails on a request that breaks the description."""

    def test_stop_raises_on_a_dispatch_without_event_type(self):
        gh = fakegh.FakeGitHub(APP_ID, relay.APP_PUB, flavor="api.github.com").start()
        gh.contract_tally = None
        try:
            c = FakeClient(gh)
            st, _, body = c.call("POST", "/repos/org1/repo1/dispatches", {"client_payload": {}},
                                 c.token("org1/repo1"))
            self.assertEqual(st, 422, body)  # what GitHub answers too
        finally:
            with self.assertRaises(C.ContractViolation) as cm:
                gh.stop()
        text = str(cm.exception)
        print("\n--- the deliberately wrong dispatch, as the suite reports it:\n" + text)
        self.assertIn("POST /repos/org1/repo1/dispatches -> repos/create-dispatch-event", text)
        self.assertIn("'event_type' is a required property", text)
        self.assertIn("requestBody/content/application~1json/schema/required", text)
        self.assertIn("1 problem(s)", text)  # the fake's own answers follow the description

    def test_ghes_fake_serves_under_api_v3_only(self):
        gh = fakegh.FakeGitHub(APP_ID, relay.APP_PUB, flavor="ghes-3.19").start()
        gh.contract_tally = None
        try:
            self.assertTrue(gh.url.endswith("/api/v3"))
            self.assertEqual(gh.web_url, "http://127.0.0.1:%d" % gh.port)
            c = FakeClient(gh)
            self.assertEqual(c.call("GET", "/repos/org1/repo1/installation", headers=c.jwt(),
                                    prefix=False)[0], 404)
            self.assertEqual(c.call("GET", "/repos/org1/repo1/installation",
                                    headers=c.jwt())[0], 200)
            self.assertEqual([r.path for r in gh.requests()], ["/repos/org1/repo1/installation"] * 2)
        finally:
            with self.assertRaises(C.ContractViolation) as cm:
                gh.stop()
        self.assertIn("GET /repos/org1/repo1/installation: outside the API prefix '/api/v3'",
                      str(cm.exception))
        self.assertIn("1 problem(s)", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
