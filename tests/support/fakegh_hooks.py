"""fakegh_hooks - the GitHub App's webhook delivery log, for the fake GitHub (fakegh.py).

GitHub's hookshot delivers each event (a guid, the X-GitHub-Delivery) to the App's webhook URL and
records every attempt in the App's delivery log; it never retries by itself. This mixin gives
FakeGitHub that side of GitHub:

  send_webhook(event, payload, ...)   "sends" a webhook to the target URL as hookshot does (signed
                                      with the webhook secret, X-GitHub-Event, X-GitHub-Delivery,
                                      X-GitHub-Hook-ID, X-GitHub-Hook-Installation-Target-Type/-ID,
                                      User-Agent GitHub-Hookshot/...) and records the attempt with
                                      its outcome: status_code 0 and "failed to connect" when the
                                      relay is down or does not answer within `timeout`, else the
                                      HTTP status ("OK" for 2xx, "Invalid HTTP Response: N" else).

and serves, with the App JWT checked like the fake's other App endpoints (operations of GitHub's
REST description in brackets):

  GET  /app/hook/deliveries                   [apps/list-webhook-deliveries] newest first;
                                              per_page (default 30, at most 100, and at most
                                              `hook_per_page_cap`), cursor, redelivery, status
                                              (success: 200-399, failure: 400-599: as GitHub, it
                                              never returns status_code 0); pagination by cursor
                                              in a Link header: <URL>; rel="next", <URL>; rel="prev"
  GET  /app/hook/deliveries/{id}              [apps/get-webhook-delivery] the item plus url,
                                              request {headers, payload}, response {headers,
                                              payload}
  POST /app/hook/deliveries/{id}/attempts     [apps/redeliver-webhook-delivery] 202 {}, then (on a
                                              thread, as GitHub does it later) the same webhook
                                              again: same guid, new attempt id, redelivery true

Fault injection: fail_redelivery(guid, status_code=0) makes every redelivery of that guid fail
(recorded, the relay never sees it). Attempt ids start above 2^32 and increase.
"""

import hashlib
import hmac
import http.client
import json
import re
import threading
import time
import urllib.parse
import uuid

HOOK_ID = 987654321
HOOK_ATTEMPT_ID_BASE = 2**32 + 77_000  # attempt ids > 2^32
HOOKSHOT_AGENT = "GitHub-Hookshot/fake7e1"
_CURSOR = re.compile(r"^v([01])_(\d{1,19})$")


def _iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class HookDeliveries:
    """Mixin of FakeGitHub (which provides _lock, _cond, now(), url, _check_app_jwt,
    _unauthorized_jwt, _invalid)."""

    def _hooks_init(self, hook_per_page_cap=100):
        self.hook_per_page_cap = hook_per_page_cap
        self.hook_url = None
        self.hook_secret = None
        self.hook_timeout = 10.0
        self._hook_attempts = []  # dicts, oldest first (ids increase)
        self._hook_next_id = HOOK_ATTEMPT_ID_BASE
        self._hook_failing = {}  # guid -> status_code its redeliveries get
        self._hook_threads = []

    # ------------------------------------------------------------------ test side

    def hook_target(self, url, secret, timeout=10.0):
        """Where webhooks go (the relay's /github/webhook) and the secret they are signed with.
        `timeout`: an answer later than this is a failed attempt (GitHub gives 10 s)."""
        with self._lock:
            self.hook_url, self.hook_secret, self.hook_timeout = url, secret, timeout

    def fail_redelivery(self, guid, status_code=0):
        """Every later redelivery of `guid` fails with `status_code` (0: failed to connect)
        without reaching the relay."""
        with self._lock:
            self._hook_failing[guid] = int(status_code)

    def send_webhook(self, event, payload, guid=None, action=None, installation_id=1000,
                     repository_id=65600975):
        """Delivers a new event (a new guid unless given) and returns its attempt (a dict as the
        log lists it). `payload`: an object (sent as compact JSON) or bytes."""
        body = payload if isinstance(payload, (bytes, bytearray)) else json.dumps(
            payload, separators=(",", ":")).encode("utf-8")
        if action is None and not isinstance(payload, (bytes, bytearray)):
            action = payload.get("action") if isinstance(payload, dict) else None
        return self._deliver(event, bytes(body), guid or str(uuid.uuid4()), action,
                             installation_id, repository_id, redelivery=False)

    def hook_attempts(self, guid=None, redelivery=None):
        """Recorded attempts, oldest first (copies), of one guid and/or of one kind."""
        with self._lock:
            return [self._hook_item(a) for a in self._hook_attempts
                    if (guid is None or a["guid"] == guid)
                    and (redelivery is None or a["redelivery"] == redelivery)]

    def wait_hook_attempts(self, n, guid=None, redelivery=None, timeout=10.0):
        """Waits until at least n matching attempts are recorded; returns them (maybe fewer)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                got = self.hook_attempts(guid, redelivery)
                left = deadline - time.monotonic()
                if len(got) >= n or left <= 0:
                    return got
                self._cond.wait(min(left, 0.1))

    def hook_guid_of(self, attempt_id):
        """The guid of attempt `attempt_id`, None when unknown."""
        with self._lock:
            a = self._hook_by_id(int(attempt_id))
            return a["guid"] if a else None

    def hook_join(self, timeout=10.0):
        """Waits for redeliveries still being sent (stop() does too)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._hook_threads)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ hookshot

    def _deliver(self, event, body, guid, action, installation_id, repository_id, redelivery):
        with self._lock:
            url, secret, timeout = self.hook_url, self.hook_secret, self.hook_timeout
            failing = self._hook_failing.get(guid) if redelivery else None
        if url is None:
            raise RuntimeError("hook_target() first: the fake has nowhere to send webhooks")
        headers = {
            "Accept": "*/*",
            "Content-Type": "application/json",
            "User-Agent": HOOKSHOT_AGENT,
            "X-GitHub-Delivery": guid,
            "X-GitHub-Event": event,
            "X-GitHub-Hook-ID": str(HOOK_ID),
            "X-GitHub-Hook-Installation-Target-ID": str(self.app_id),
            "X-GitHub-Hook-Installation-Target-Type": "integration",
        }
        if secret:
            key = secret.encode("utf-8")
            headers["X-Hub-Signature"] = "sha1=" + hmac.new(key, body, hashlib.sha1).hexdigest()
            headers["X-Hub-Signature-256"] = (
                "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest())
        delivered_at = self.now()
        t0 = time.monotonic()
        status_code, resp_headers, resp_body = 0, None, None
        if failing is None:
            status_code, resp_headers, resp_body = self._post(url, body, headers, timeout)
        elif failing:
            status_code = failing
        if status_code == 0:
            status = "failed to connect"
        elif 200 <= status_code < 300:
            status = "OK"
        else:
            status = "Invalid HTTP Response: %d" % status_code
        with self._cond:
            aid = self._hook_next_id
            self._hook_next_id += 1
            self._hook_attempts.append({
                "id": aid, "guid": guid, "delivered_at": _iso(delivered_at),
                "redelivery": redelivery, "duration": round(time.monotonic() - t0, 2),
                "status": status, "status_code": status_code, "event": event,
                "action": action, "installation_id": installation_id,
                "repository_id": repository_id, "throttled_at": None, "url": url,
                "_request": (headers, body), "_response": (resp_headers, resp_body),
            })
            self._cond.notify_all()
            return self._hook_item(self._hook_attempts[-1])

    @staticmethod
    def _post(url, body, headers, timeout):
        """(status_code, headers, body text); status_code 0 when no answer came in time."""
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        try:
            conn.request("POST", parts.path or "/", body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data.decode(
                "utf-8", "replace")
        except (OSError, http.client.HTTPException):
            return 0, None, None
        finally:
            conn.close()

    @staticmethod
    def _hook_item(a):
        return {k: v for k, v in a.items() if not k.startswith("_") and k != "url"}

    def _hook_by_id(self, aid):
        for a in self._hook_attempts:
            if a["id"] == aid:
                return a
        return None

    # ------------------------------------------------------------------ REST routes

    def _r_hook_deliveries(self, rec):
        why = self._check_app_jwt(rec)
        if why:
            return self._unauthorized_jwt(rec, why)
        q = rec.query
        try:
            per_page = max(1, min(100, int(q.get("per_page", "30"))))
        except ValueError:
            return self._invalid("Invalid request.\n\nper_page must be an integer.")
        per_page = min(per_page, max(1, int(self.hook_per_page_cap)))
        redelivery = q.get("redelivery")
        status = q.get("status")
        if status not in (None, "success", "failure") or redelivery not in (None, "true",
                                                                             "false"):
            return self._invalid("Validation Failed")
        with self._lock:
            items = [a for a in self._hook_attempts
                     if (redelivery is None or a["redelivery"] == (redelivery == "true"))
                     and (status is None
                          or (status == "success" and 200 <= a["status_code"] < 400)
                          or (status == "failure" and 400 <= a["status_code"] < 600))]
        items.sort(key=lambda a: a["id"], reverse=True)  # newest first
        cursor = q.get("cursor")
        if cursor is not None:
            m = _CURSOR.match(cursor)
            if not m:
                rec.note = "bad cursor"
                return self._invalid("Validation Failed: cursor is invalid")
            mark = int(m.group(2))
            if m.group(1) == "1":  # this attempt and older
                items = [a for a in items if a["id"] <= mark]
            else:  # the page just newer than this attempt
                newer = [a for a in items if a["id"] > mark]
                items = newer[-per_page:] + [a for a in items if a["id"] <= mark]
        page, rest = items[:per_page], items[per_page:]
        links = []
        extra = "".join("&%s=%s" % (k, urllib.parse.quote(q[k], safe=""))
                        for k in ("redelivery", "status") if k in q)
        base = "%s/app/hook/deliveries?per_page=%d%s&cursor=" % (self.url, per_page, extra)
        if rest:
            links.append('<%sv1_%d>; rel="next"' % (base, rest[0]["id"]))
        if cursor is not None and page:
            links.append('<%sv0_%d>; rel="prev"' % (base, page[0]["id"]))
        return 200, ({"link": ", ".join(links)} if links else {}), [self._hook_item(a)
                                                                    for a in page]

    def _r_hook_delivery(self, rec, delivery_id):
        why = self._check_app_jwt(rec)
        if why:
            return self._unauthorized_jwt(rec, why)
        with self._lock:
            a = self._hook_by_id(int(delivery_id))
            if a is None:
                return 404, {}, {"message": "Not Found",
                                 "documentation_url": "https://docs.github.com/rest"}
            item = dict(self._hook_item(a), url=a["url"])
            req_headers, req_body = a["_request"]
            resp_headers, resp_body = a["_response"]
        try:
            payload = json.loads(req_body)
        except ValueError:
            payload = None
        item["request"] = {"headers": dict(req_headers), "payload": payload}
        item["response"] = {"headers": resp_headers, "payload": resp_body}
        return 200, {}, item

    def _r_hook_redeliver(self, rec, delivery_id):
        why = self._check_app_jwt(rec)
        if why:
            return self._unauthorized_jwt(rec, why)
        with self._lock:
            a = self._hook_by_id(int(delivery_id))
            if a is None:
                return 404, {}, {"message": "Not Found",
                                 "documentation_url": "https://docs.github.com/rest"}
            headers, body = a["_request"]
            args = (a["event"], body, a["guid"], a["action"], a["installation_id"],
                    a["repository_id"])
            t = threading.Thread(target=self._deliver, args=args, kwargs={"redelivery": True},
                                 daemon=True, name="fakegh-hookshot")
            self._hook_threads.append(t)
        t.start()
        return 202, {}, {}

    _HOOK_ROUTES = [
        ("GET", re.compile(r"^/app/hook/deliveries$"), "_r_hook_deliveries"),
        ("GET", re.compile(r"^/app/hook/deliveries/(\d+)$"), "_r_hook_delivery"),
        ("POST", re.compile(r"^/app/hook/deliveries/(\d+)/attempts$"), "_r_hook_redeliver"),
    ]
