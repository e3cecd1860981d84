"""contract - checks the fake GitHub's traffic against GitHub's own REST API description.

GitHub publishes its REST API as OpenAPI 3.0 in the npm package `@octokit/openapi`
(`generated/api.github.com.deref.json`, and `generated/ghes-3.19.deref.json` for GitHub
Enterprise Server 3.19: every $ref already resolved). This module

  - fetches the pinned tarball from the npm registry with curl (no npm needed), checks its pinned
    sha512 integrity and keeps it with a per-operation index in a cache outside the repository
    (CRCR_OPENAPI_CACHE, default $XDG_CACHE_HOME/crcr/openapi or ~/.cache/crcr/openapi): a run
    downloads at most once, and a test process loads only the index and the operations it sees
    (the whole description takes ~4 s to parse; an operation ~1 ms);
  - checks what FakeGitHub recorded (tests/support/fakegh.py keeps one Exchange per request, and
    calls check() from stop()): that the operation exists (method and path template, the API
    prefix - "" or "/api/v3" - stripped), that the query parameters are declared ones of the
    right type, that the JSON body validates against the request schema, and that the fake's
    answer validates against the response schema of its status code (an answer injected by a
    test's fault rule is not the fake's own: only its request is checked);
  - counts the requests it checked per operation and writes the counts to
    $CRCR_TEST_OUTPUT/contract/<flavor>/<pid>.json (default <dir of CRCR_BIN>/test-output), which
    `python3 contract.py summary DIR` adds up.

Validation is Debian's python3-jsonschema (Draft 4, the dialect OpenAPI 3.0's schema object
extends; `format` is not checked) after converting the few OpenAPI 3.0 keywords JSON Schema
lacks: `nullable: true` adds "null" to `type` (and to `enum`), and a nullable schema without a
type becomes anyOf [null, schema]; OpenAPI-only annotations (discriminator, readOnly, writeOnly,
xml, example) are ignored by the validator. Compiled validators are cached per operation.
Hand-written here is only what jsonschema does not do: finding the operation of a request path
and mapping status codes to response schemas.

Command line:
    python3 contract.py fetch [FLAVOR...]   download (if needed) and index; prints the cache dir
    python3 contract.py summary DIR         adds up DIR/contract/*/*.json, writes
                                            DIR/contract-summary.txt and prints it

Environment: CRCR_GITHUB_FLAVOR (api.github.com | ghes-3.19) picks the description and the
fake's API prefix; CRCR_CONTRACT=0 turns the check off (offline work only: CI never sets it).
"""

import base64
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading

import jsonschema

OPENAPI_PACKAGE = "@octokit/openapi"
OPENAPI_VERSION = "23.0.2"
OPENAPI_INTEGRITY = ("sha512-pV8M7L9GY23AybNvTmo2nyjmpmnt6+2sRE/tqr0ZLQcPS4lnw7u5eZGNmwRNkBC3D7gZ"
                     "XbFx5AHzLUVRBXGDhg==")
OPENAPI_TARBALL = "https://registry.npmjs.org/@octokit/openapi/-/openapi-%s.tgz" % OPENAPI_VERSION
FLAVORS = {
    "api.github.com": "package/generated/api.github.com.deref.json",
    "ghes-3.19": "package/generated/ghes-3.19.deref.json",
}
DEFAULT_FLAVOR = "api.github.com"
INDEX_FORMAT = 1  # bump when the index layout changes: the cache is rebuilt
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
# Keys of a schema object that only document it (dropped from the cached operations).
_DOC_KEYS = ("description", "example", "examples", "externalDocs", "xml", "title")
# GitHub's body for an error a description does not list for the operation (401 Bad credentials,
# 5xx, ...): "Basic Error" as every operation's documented errors have it.
BASIC_ERROR = {"type": "object", "required": ["message"],
               "properties": {"message": {"type": "string"},
                              "documentation_url": {"type": "string"},
                              "status": {"type": "string"}}}


class ContractViolation(AssertionError):
    """Raised by FakeGitHub.stop() when requests or answers broke the description."""


class Violation(str):
    """One problem of one exchange (its text); `key` groups the same problem of other
    exchanges in a report (operation, schema path, place in the instance)."""

    def __new__(cls, key, text):
        v = super().__new__(cls, text)
        v.key = key
        return v


def flavor_from_env():
    f = os.environ.get("CRCR_GITHUB_FLAVOR") or DEFAULT_FLAVOR
    if f not in FLAVORS:
        raise ValueError("CRCR_GITHUB_FLAVOR=%r: expected one of %s" % (f, ", ".join(FLAVORS)))
    return f


def enabled():
    return os.environ.get("CRCR_CONTRACT", "1") != "0"


# ------------------------------------------------------------------------------ the cache

def cache_root():
    d = os.environ.get("CRCR_OPENAPI_CACHE")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "crcr", "openapi")


def _version_dir():
    return os.path.join(cache_root(), "%s-i%d" % (OPENAPI_VERSION, INDEX_FORMAT))


def _integrity(path):
    h = hashlib.sha512()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha512-" + base64.b64encode(h.digest()).decode("ascii")


def _download(dest):
    """The pinned tarball into `dest`, checked against OPENAPI_INTEGRITY."""
    tmp = dest + ".part"
    subprocess.run(["curl", "-sSfL", "--retry", "3", "--max-time", "300", "-o", tmp,
                    OPENAPI_TARBALL], check=True)
    got = _integrity(tmp)
    if got != OPENAPI_INTEGRITY:
        os.unlink(tmp)
        raise RuntimeError("%s: integrity %s, expected the pinned %s"
                           % (OPENAPI_TARBALL, got, OPENAPI_INTEGRITY))
    os.replace(tmp, dest)


def _strip_docs(s):
    """A copy of schema `s` without documentation keys; property names are kept as they are."""
    if isinstance(s, list):
        return [_strip_docs(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {}
    for k, v in s.items():
        if k in _DOC_KEYS:
            continue
        if k in ("properties", "patternProperties") and isinstance(v, dict):
            out[k] = {name: _strip_docs(sub) for name, sub in v.items()}
        elif k in ("enum", "default", "required"):
            out[k] = v
        else:
            out[k] = _strip_docs(v)
    return out


def _json_schema_of(content):
    """The schema of the JSON media type of a request body or response `content`, or None."""
    for mt in ("application/json", "application/scim+json"):
        if mt in (content or {}):
            return (content[mt] or {}).get("schema")
    for mt, v in (content or {}).items():
        if mt.endswith("+json") or mt == "application/vnd.github.object":
            return (v or {}).get("schema")
    return None


def _build_index(tgz, flavor, dest):
    """Indexes one description of the tarball into directory `dest` (index.json, ops/N.json)."""
    member = FLAVORS[flavor]
    with tarfile.open(tgz, "r:gz") as tf:
        f = tf.extractfile(member)
        if f is None:
            raise RuntimeError("%s: no %s" % (tgz, member))
        doc = json.load(f)
    server = (doc.get("servers") or [{"url": ""}])[0]["url"]
    prefix = re.sub(r"^[^:]+://[^/]+", "", server).rstrip("/")
    tmp = tempfile.mkdtemp(prefix=".building-", dir=os.path.dirname(dest))
    os.mkdir(os.path.join(tmp, "ops"))
    ops = []
    for template, item in doc["paths"].items():
        shared = item.get("parameters") or []
        for method in METHODS:
            op = item.get(method)
            if not op:
                continue
            params = {}
            for p in shared + (op.get("parameters") or []):
                params[(p["name"], p["in"])] = p
            rb = op.get("requestBody")
            record = {
                "operationId": op.get("operationId") or "%s %s" % (method.upper(), template),
                "method": method.upper(),
                "template": template,
                "query": [{"name": p["name"], "required": bool(p.get("required")),
                           "schema": _strip_docs(p.get("schema") or {})}
                          for (name, where), p in params.items() if where == "query"],
                "request": None if rb is None else {
                    "required": bool(rb.get("required")),
                    "media": sorted((rb.get("content") or {}).keys()),
                    "schema": _strip_docs(_json_schema_of(rb.get("content"))),
                },
                "responses": {
                    status: {"media": sorted((r.get("content") or {}).keys()),
                             "schema": _strip_docs(_json_schema_of(r.get("content")))}
                    for status, r in (op.get("responses") or {}).items()
                },
            }
            n = len(ops)
            with open(os.path.join(tmp, "ops", "%d.json" % n), "w", encoding="utf-8") as out:
                json.dump(record, out, separators=(",", ":"))
            ops.append([record["method"], template, record["operationId"], n])
    with open(os.path.join(tmp, "index.json"), "w", encoding="utf-8") as out:
        json.dump({"package": OPENAPI_PACKAGE, "version": OPENAPI_VERSION, "flavor": flavor,
                   "file": member, "prefix": prefix, "operations": ops}, out)
    os.rename(tmp, dest)


def ensure(flavor):
    """The directory of the indexed description of `flavor`, downloading and indexing it first
    when the cache lacks it (one process at a time: a lock file)."""
    vdir = _version_dir()
    dest = os.path.join(vdir, flavor)
    if os.path.isfile(os.path.join(dest, "index.json")):
        return dest
    os.makedirs(vdir, exist_ok=True)
    with open(os.path.join(vdir, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.isfile(os.path.join(dest, "index.json")):
            return dest
        tgz = os.path.join(cache_root(), "openapi-%s.tgz" % OPENAPI_VERSION)
        if not os.path.isfile(tgz) or _integrity(tgz) != OPENAPI_INTEGRITY:
            _download(tgz)
        if os.path.isdir(dest):  # a half-built one from an interrupted run
            shutil.rmtree(dest)
        _build_index(tgz, flavor, dest)
    return dest


# ------------------------------------------------------------------------------ OpenAPI -> JSON Schema

def to_json_schema(s):
    """OpenAPI 3.0 schema object -> JSON Schema (Draft 4): `nullable` handled, recursively."""
    if isinstance(s, list):
        return [to_json_schema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {}
    for k, v in s.items():
        if k in ("properties", "patternProperties") and isinstance(v, dict):
            out[k] = {name: to_json_schema(sub) for name, sub in v.items()}
        elif k in ("enum", "default", "required", "nullable"):
            out[k] = v
        else:
            out[k] = to_json_schema(v)
    if out.pop("nullable", False) is True:
        if "type" in out:
            t = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = t + (["null"] if "null" not in t else [])
            if "enum" in out and None not in out["enum"]:
                out["enum"] = list(out["enum"]) + [None]
        else:
            out = {"anyOf": [{"type": "null"}, out]}
    return out


# ------------------------------------------------------------------------------ the description

class Operation:
    def __init__(self, record):
        self.id = record["operationId"]
        self.method = record["method"]
        self.template = record["template"]
        self.query = {q["name"]: q for q in record["query"]}
        self.request = record["request"]
        self.responses = record["responses"]
        self._validators = {}
        self._lock = threading.Lock()

    def validator(self, where, schema):
        """A compiled Draft 4 validator of `schema` (an OpenAPI schema), cached under `where`."""
        with self._lock:
            v = self._validators.get(where)
            if v is None:
                v = jsonschema.Draft4Validator(to_json_schema(schema))
                self._validators[where] = v
            return v

    def __repr__(self):
        return "%s %s (%s)" % (self.method, self.template, self.id)


# Path parameters whose values may hold '/' (contents/{path}, git/ref/{ref}, branches/{branch}).
_SLASHED_PARAMS = ("{path}", "{ref}", "{branch}")


def _template_regex(template, greedy_last):
    parts = template.strip("/").split("/")
    out = []
    for i, p in enumerate(parts):
        if p.startswith("{") and p.endswith("}"):
            greedy = greedy_last and i == len(parts) - 1 and p in _SLASHED_PARAMS
            out.append(".+" if greedy else "[^/]+")
        else:
            out.append(re.escape(p))
    return re.compile("^/" + "/".join(out) + "$")


class Spec:
    """One indexed description: operations by method and path, loaded lazily."""

    def __init__(self, flavor):
        self.flavor = flavor
        self.dir = ensure(flavor)
        with open(os.path.join(self.dir, "index.json"), encoding="utf-8") as f:
            idx = json.load(f)
        self.version = idx["version"]
        self.file = idx["file"]
        self.prefix = idx["prefix"]
        self._by_method = {}
        for method, template, opid, n in idx["operations"]:
            literal = sum(1 for p in template.strip("/").split("/") if not p.startswith("{"))
            self._by_method.setdefault(method, []).append(
                (template, n, literal, _template_regex(template, False),
                 _template_regex(template, True)))
        self._ops = {}
        self._lock = threading.Lock()

    def _load(self, n):
        with self._lock:
            op = self._ops.get(n)
            if op is None:
                with open(os.path.join(self.dir, "ops", "%d.json" % n), encoding="utf-8") as f:
                    op = Operation(json.load(f))
                self._ops[n] = op
            return op

    def find(self, method, path):
        """The Operation of `method` on `path` (without the API prefix and query), or None. A
        trailing {path}, {ref} or {branch} may hold '/' when nothing else matches; among
        several matches the most literal template wins."""
        cands = self._by_method.get(method.upper(), [])
        for greedy in (False, True):
            best = None
            for template, n, literal, rx, rx_greedy in cands:
                if (rx_greedy if greedy else rx).match(path):
                    if best is None or literal > best[0]:
                        best = (literal, n)
            if best is not None:
                return self._load(best[1])
        return None


_SPECS = {}
_SPECS_LOCK = threading.Lock()


def spec(flavor=None):
    flavor = flavor or flavor_from_env()
    with _SPECS_LOCK:
        s = _SPECS.get(flavor)
        if s is None:
            s = _SPECS[flavor] = Spec(flavor)
        return s


# ------------------------------------------------------------------------------ checking

class Exchange:
    """One request and the answer as the fake recorded them. `path` is without the API prefix
    (None when the request was outside it), `raw_path` as sent; `injected` is True when a test's
    fault rule wrote the answer (or dropped the connection: status 0)."""

    __slots__ = ("method", "raw_path", "path", "query", "headers", "body", "status",
                 "response_headers", "response", "injected")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))


def _schema_path(prefix, error):
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in error.absolute_schema_path]
    return "/".join([prefix] + parts)


def _instance_path(error):
    return "".join("[%d]" % p if isinstance(p, int) else "." + str(p)
                   for p in error.absolute_path) or "(the whole body)"


def _coerce_query(value, schema):
    t = (schema or {}).get("type")
    if t == "integer" and re.fullmatch(r"-?\d+", value):
        return int(value)
    if t == "boolean" and value in ("true", "false"):
        return value == "true"
    return value


def _validate(name, op, where, schema, instance, what, pointer, out, limit=3):
    """Appends to `out` the first `limit` errors of `instance` against `schema`, each with the
    place in the instance and the path in the description."""
    v = op.validator(where, schema)
    errors = sorted(v.iter_errors(instance), key=lambda e: [str(p) for p in
                                                            e.absolute_schema_path])
    for e in errors[:limit]:
        at = " " + _instance_path(e) if e.absolute_path or what.endswith(("body", "answer")) \
            else ""
        spath = _schema_path(pointer, e)
        out.append(Violation((op.id, what, spath, _instance_path(e)),
                             "%s: %s%s: %s (schema: %s)" % (name, what, at, e.message[:300],
                                                           spath)))


def check_exchange(sp, x):
    """Problems of one exchange (list of str, empty when it follows the description), and the
    Operation (None when there is none)."""
    where = "%s %s" % (x.method, x.raw_path)
    if x.path is None:
        return [Violation(("outside", x.method, x.raw_path),
                          "%s: outside the API prefix %r of %s" % (where, sp.prefix,
                                                                   sp.flavor))], None
    op = sp.find(x.method, x.path)
    if op is None:
        return [Violation(("no operation", x.method, x.path),
                          "%s: no such operation in %s %s (%s)" % (where, OPENAPI_PACKAGE,
                                                                   sp.version, sp.file))], None
    name = "%s -> %s [%s %s]" % (where, op.id, op.method, op.template)
    pointer = "#/paths/%s/%s" % (op.template.replace("~", "~0").replace("/", "~1"),
                                 op.method.lower())
    problems = []

    # Query parameters: declared, of their type; the required ones present.
    for qname, value in sorted((x.query or {}).items()):
        q = op.query.get(qname)
        if q is None:
            problems.append(Violation((op.id, "query", qname),
                                      "%s: query parameter %r is not a parameter of the "
                                      "operation" % (name, qname)))
            continue
        _validate(name, op, "query:" + qname, q["schema"], _coerce_query(value, q["schema"]),
                  "query parameter " + qname, "%s/parameters/%s/schema" % (pointer, qname),
                  problems)
    for qname, q in op.query.items():
        if q["required"] and qname not in (x.query or {}):
            problems.append(Violation((op.id, "query missing", qname),
                                      "%s: required query parameter %r missing"
                                      % (name, qname)))

    # The request body.
    body = x.body or b""
    if body.strip():
        if op.request is None:
            problems.append(Violation((op.id, "body"),
                                      "%s: a body of %d bytes, but the operation takes none"
                                      % (name, len(body))))
        else:
            try:
                doc = json.loads(body)
            except (ValueError, UnicodeDecodeError) as e:
                problems.append(Violation((op.id, "not JSON"),
                                          "%s: request body is not JSON (%s)" % (name, e)))
            else:
                if op.request["schema"] is not None:
                    _validate(name, op, "request", op.request["schema"], doc, "request body",
                              pointer + "/requestBody/content/application~1json/schema",
                              problems)
    elif op.request is not None and op.request["required"]:
        problems.append(Violation((op.id, "no body"),
                                  "%s: the operation requires a request body, none sent"
                                  % name))

    # The answer, unless a test's fault rule wrote it.
    if not x.injected and x.status:
        problems.extend(_check_response(op, x, name, pointer))
    return problems, op


def _check_response(op, x, name, pointer):
    problems = []
    status = str(x.status)
    resp = op.responses.get(status) or op.responses.get(status[0] + "XX") \
        or op.responses.get("default")
    body = x.response or b""
    conditional = ("if-none-match" in (x.headers or {})
                   or "if-modified-since" in (x.headers or {}))
    if resp is None:
        if x.status == 304 and conditional and x.method in ("GET", "HEAD"):
            resp = {"media": [], "schema": None}  # GitHub's conditional requests, any GET
        elif x.status >= 400:
            resp = {"media": ["application/json"], "schema": BASIC_ERROR, "undocumented": True}
        else:
            return [Violation((op.id, "status", status),
                              "%s: the fake answered %s, which the operation never answers "
                              "(documented: %s)" % (name, status,
                                                    ", ".join(sorted(op.responses))))]
    rpointer = "%s/responses/%s/content/application~1json/schema" % (pointer, status)
    if not resp["media"]:
        if body.strip():
            problems.append(Violation((op.id, "answer body", status),
                                      "%s: answer %s has a body of %d bytes; the description "
                                      "has none" % (name, status, len(body))))
        return problems
    ctype = ((x.response_headers or {}).get("content-type") or "").split(";")[0].strip()
    if ctype and "json" not in ctype:
        # GitHub's custom media types (application/vnd.github.raw, ...) are documented in the
        # operations' prose, not in their content maps: one the request asked for is fine.
        asked = ctype.startswith("application/vnd.github.") and \
            ctype in (x.headers or {}).get("accept", "")
        if ctype not in resp["media"] and not asked:
            problems.append(Violation((op.id, "media", status, ctype),
                                      "%s: answer %s of media type %r; the description has %s"
                                      % (name, status, ctype, ", ".join(resp["media"]))))
        return problems  # a raw media type (application/vnd.github.raw): no schema
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        return [Violation((op.id, "answer not JSON", status),
                          "%s: answer %s is not JSON (%s)" % (name, status, e))]
    if resp["schema"] is not None:
        where = "response:" + status + (":basic-error" if resp.get("undocumented") else "")
        _validate(name, op, where, resp["schema"], doc, "answer %s body" % status,
                  "BasicError" if resp.get("undocumented") else rpointer, problems)
    return problems


# ------------------------------------------------------------------------------ counting

class Tally:
    """Checked requests per operation of one process, written to the test-output dir."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}  # flavor -> {operationId: n}
        self.answers = {}  # flavor -> answers checked against a response schema
        self.violations = {}  # flavor -> n

    def add(self, flavor, opid, answer_checked, bad):
        with self.lock:
            c = self.counts.setdefault(flavor, {})
            c[opid] = c.get(opid, 0) + 1
            self.answers[flavor] = self.answers.get(flavor, 0) + (1 if answer_checked else 0)
            self.violations[flavor] = self.violations.get(flavor, 0) + (1 if bad else 0)

    def write(self):
        d = output_dir()
        if not d:
            return
        with self.lock:
            snapshot = {f: dict(c) for f, c in self.counts.items()}
            answers, violations = dict(self.answers), dict(self.violations)
        suite = os.path.basename(sys.argv[-1]) if sys.argv else "?"
        for flavor, counts in snapshot.items():
            fd = os.path.join(d, "contract", flavor)
            os.makedirs(fd, exist_ok=True)
            tmp = os.path.join(fd, ".%d.tmp" % os.getpid())
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"suite": suite, "pid": os.getpid(), "counts": counts,
                           "answers": answers.get(flavor, 0),
                           "violations": violations.get(flavor, 0)}, f)
            os.replace(tmp, os.path.join(fd, "%d.json" % os.getpid()))


TALLY = Tally()


def output_dir():
    d = os.environ.get("CRCR_TEST_OUTPUT")
    if d:
        return d
    binary = os.environ.get("CRCR_BIN")
    if binary:
        return os.path.join(os.path.dirname(os.path.abspath(binary)), "test-output")
    return None


def check(exchanges, flavor=None, tally=TALLY):
    """Checks recorded exchanges; returns the list of violations (str). Counts them in `tally`
    (None: not counted)."""
    sp = spec(flavor)
    out = []
    for x in exchanges:
        problems, op = check_exchange(sp, x)
        out.extend(problems)
        if tally is not None:
            tally.add(sp.flavor, op.id if op else "(no operation)",
                      op is not None and not x.injected and bool(x.status), bool(problems))
    if tally is not None and exchanges:
        tally.write()
    return out


def report(violations, flavor=None):
    """The text of a ContractViolation: each distinct problem once, with how often it came."""
    sp = spec(flavor)
    groups = {}
    for v in violations:
        g = groups.setdefault(getattr(v, "key", v), [v, 0])
        g[1] += 1
    head = ("%d problem(s) (%d distinct) in requests to or answers of the fake GitHub against "
            "GitHub's REST API description (%s %s, %s):"
            % (len(violations), len(groups), OPENAPI_PACKAGE, sp.version, sp.file))
    lines = [("%dx " % n if n > 1 else "") + first for first, n in list(groups.values())[:25]]
    more = len(groups) - min(len(groups), 25)
    return "\n  ".join([head] + lines) + ("\n  ... and %d more" % more if more > 0 else "")


# ------------------------------------------------------------------------------ command line

def summary(outdir):
    base = os.path.join(outdir, "contract")
    lines = []
    total = 0
    for flavor in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        counts, answers, violations, files, suites = {}, 0, 0, 0, set()
        for name in sorted(os.listdir(os.path.join(base, flavor))):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(base, flavor, name), encoding="utf-8") as f:
                d = json.load(f)
            files += 1
            suites.add(d.get("suite", "?"))
            answers += d.get("answers", 0)
            violations += d.get("violations", 0)
            for opid, n in d["counts"].items():
                counts[opid] = counts.get(opid, 0) + n
        n = sum(counts.values())
        total += n
        lines.append("%s (%s %s): %d requests checked (%d answers against their response "
                     "schema), %d with violations, from %d test processes of %d suites, %d "
                     "operations:" % (flavor, OPENAPI_PACKAGE, OPENAPI_VERSION, n, answers,
                                      violations, files, len(suites), len(counts)))
        for opid, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append("  %7d  %s" % (c, opid))
    if not lines:
        lines.append("no contract counts under %s" % base)
    text = "\n".join(["GitHub REST API contract check: %d requests in all" % total] + lines) + "\n"
    with open(os.path.join(outdir, "contract-summary.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    return text


def main(argv):
    if len(argv) >= 2 and argv[1] == "fetch":
        for flavor in argv[2:] or list(FLAVORS):
            if flavor not in FLAVORS:
                print("unknown flavor %r (%s)" % (flavor, ", ".join(FLAVORS)), file=sys.stderr)
                return 2
            d = ensure(flavor)
            print("%s %s %s: %s" % (OPENAPI_PACKAGE, OPENAPI_VERSION, flavor, d))
        return 0
    if len(argv) == 3 and argv[1] == "summary":
        sys.stdout.write(summary(argv[2]))
        return 0
    print(__doc__.split("Command line:", 1)[1].split("Environment:", 1)[0], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
