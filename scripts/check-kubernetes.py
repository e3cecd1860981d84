#!/usr/bin/env python3
"""Checks deploy/kubernetes/ the way `kubectl apply -k` would meet it.

The manifests come from `kubectl kustomize deploy/kubernetes` when kubectl is installed, else
from the files the kustomization lists (parsed with PyYAML, Debian's python3-yaml). Checked:

- the kustomization applies no Secret and no placeholder (REPLACE_ME);
- the objects created by hand (docs/deployment.md's commands: the Secrets crcr-secrets from
  secrets.env.example and crcr-app-key, the ConfigMap crcr-db-ca) hold every key the Deployment
  reads, and the example lists exactly the keys the Deployment reads;
- every volume is mounted and every mount has a volume; GITHUB_APP_PRIVATE_KEY_FILE and the
  store URI's sslrootcert name files those volumes provide; the URI says sslmode=verify-full;
- every variable in the ConfigMap and the Secret is one crcr knows (docs/configuration.md);
- the Service, the Ingress, the PodDisruptionBudget and the probes point at what exists;
- the PostgreSQL connection budget: an explicit pool that fits the workers and HTTP threads, and
  (replicas + maxSurge) x (pool + 1) + reserved + headroom <= max_connections.

Prints one line per check and "N passed, N failed"; exits 1 on a failure, 77 when PyYAML is not
available. CRCR_KUBECTL names the kubectl to use, or `none` to read the files without it.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import urllib.parse

try:
    import yaml
except ImportError:  # a Python without python3-yaml (pyenv, a venv): try Debian's own
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath(
            "/usr/bin/python3") and not os.environ.get("CRCR_CHECK_K8S_REEXEC"):
        os.environ["CRCR_CHECK_K8S_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    print("SKIP: PyYAML is not installed (apt-get install python3-yaml)")
    sys.exit(77)

ROOT = pathlib.Path(__file__).resolve().parent.parent
KDIR = ROOT / "deploy" / "kubernetes"
SECRETS_EXAMPLE = KDIR / "secrets.env.example"

# PostgreSQL's defaults (postgresql.conf): max_connections 100, superuser_reserved_connections 3;
# HEADROOM is what docs/deployment.md keeps for psql, crcr's command-line tools and monitoring.
PG_MAX_CONNECTIONS = 100
PG_SUPERUSER_RESERVED = 3
HEADROOM = 10

results = {"passed": 0, "failed": 0}


def check(ok, what):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok' if ok else 'FAIL'} - {what}")
    return ok


def find_kubectl():
    name = os.environ.get("CRCR_KUBECTL", "kubectl")
    return None if name == "none" else shutil.which(name)


def load_objects():
    kubectl = find_kubectl()
    if kubectl:
        p = subprocess.run([kubectl, "kustomize", str(KDIR)], capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            check(False, f"kubectl kustomize deploy/kubernetes: {p.stderr.strip()}")
            return None, None
        print("check-kubernetes: manifests rendered by kubectl kustomize")
        return [d for d in yaml.safe_load_all(p.stdout) if d], p.stdout
    print("check-kubernetes: kubectl is not installed; reading the kustomization's files "
          "(kubectl kustomize is checked where kubectl is)")
    kust = yaml.safe_load((KDIR / "kustomization.yaml").read_text())
    docs, text = [], ""
    for res in kust.get("resources", []):
        t = (KDIR / res).read_text()
        text += t
        docs += [d for d in yaml.safe_load_all(t) if d]
    return docs, text


def env_file_keys(path):
    """The keys of a kubectl --from-env-file file (KEY=VALUE lines, # comments, blank lines)."""
    keys = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[-._a-zA-Z0-9]+", key):
            check(False, f"{path.name}:{n}: not a KEY=VALUE line kubectl accepts: {line!r}")
            continue
        keys[key] = value
    return keys


def documented_objects():
    """The objects docs/deployment.md creates by hand: {(kind, name): set of keys}."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    text = re.sub(r"\\\n\s*", " ", text)  # join continued lines
    found = {}
    for m in re.finditer(r"kubectl -n crcr create (secret generic|configmap) ([a-z0-9-]+)([^\n`]*)",
                         text):
        kind = "Secret" if m.group(1).startswith("secret") else "ConfigMap"
        keys = set()
        for opt in re.finditer(r"--from-(file|env-file|literal)=([^\s]+)", m.group(3)):
            if opt.group(1) == "env-file":
                keys |= set(env_file_keys(SECRETS_EXAMPLE))
            else:
                keys.add(opt.group(2).split("=", 1)[0])
        found.setdefault((kind, m.group(2)), set()).update(keys)
    return found


def known_variables():
    text = (ROOT / "docs" / "configuration.md").read_text()
    return set(re.findall(r"^\| `([A-Z0-9_]+)` \|", text, re.M))


def as_int(value, what):
    try:
        return int(str(value))
    except ValueError:
        check(False, f"{what} is an integer (found {value!r})")
        return None


def main():
    objs, text = load_objects()
    if objs is None:
        return 1
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)

    # -- nothing secret is applied -------------------------------------------------------------
    check("Secret" not in by_kind, "the kustomization applies no Secret (they are created by hand)")
    check("REPLACE_ME" not in text, "no REPLACE_ME placeholder in what the kustomization applies")
    kust = yaml.safe_load((KDIR / "kustomization.yaml").read_text())
    check(all("secret" not in r for r in kust.get("resources", [])) and
          not kust.get("secretGenerator"),
          "kustomization.yaml lists no secret file and no secretGenerator")

    deps = by_kind.get("Deployment", [])
    if not check(len(deps) == 1, "one Deployment"):
        return 1
    dep = deps[0]
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    containers = spec["containers"]
    c = [x for x in containers if x["name"] == "crcr"]
    if not check(len(c) == 1, "the Deployment has a container named crcr"):
        return 1
    c = c[0]

    # -- what the Deployment references ---------------------------------------------------------
    rendered_cm = {o["metadata"]["name"]: o.get("data", {}) for o in by_kind.get("ConfigMap", [])}
    documented = documented_objects()
    check(bool(documented), "docs/deployment.md has the kubectl create commands for the Secrets")
    example = env_file_keys(SECRETS_EXAMPLE)

    def keys_of(kind, name):
        if kind == "ConfigMap" and name in rendered_cm:
            return set(rendered_cm[name])
        return documented.get((kind, name))

    secret_refs = {}
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        cref = e.get("valueFrom", {}).get("configMapKeyRef")
        for kind, r in (("Secret", ref), ("ConfigMap", cref)):
            if not r:
                continue
            keys = keys_of(kind, r["name"])
            check(keys is not None and r["key"] in keys,
                  f"env {e['name']}: {kind} {r['name']} key {r['key']} is created "
                  f"({'optional' if r.get('optional') else 'required'})")
            if kind == "Secret":
                secret_refs.setdefault(r["name"], set()).add(r["key"])
                check(e["name"] == r["key"], f"env {e['name']} comes from the key of the same name")
    for ef in c.get("envFrom", []):
        for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if field in ef:
                name = ef[field]["name"]
                check(keys_of(kind, name) is not None, f"envFrom {kind} {name} exists")
    if "crcr-secrets" in secret_refs:
        check(set(example) == secret_refs["crcr-secrets"],
              "secrets.env.example lists exactly the crcr-secrets keys the Deployment reads "
              f"({', '.join(sorted(secret_refs['crcr-secrets']))})")

    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    for name in volumes:
        check(name in mounts, f"volume {name} is mounted")
    for name in mounts:
        check(name in volumes, f"mount {name} has a volume")
    files = {}  # path in the container -> where it comes from
    for name, v in volumes.items():
        kind, ref = ("Secret", v["secret"]["secretName"]) if "secret" in v else \
            ("ConfigMap", v["configMap"]["name"]) if "configMap" in v else (None, None)
        if not kind:
            continue
        keys = keys_of(kind, ref)
        items = v.get("secret", v.get("configMap", {})).get("items")
        for it in items or [{"key": k, "path": k} for k in sorted(keys or [])]:
            check(keys is not None and it["key"] in keys,
                  f"volume {name}: {kind} {ref} key {it['key']} is created")
            if name in mounts:
                files[mounts[name]["mountPath"].rstrip("/") + "/" + it["path"]] = f"{kind} {ref}"

    # -- configuration values --------------------------------------------------------------------
    config = {}
    for ef in c.get("envFrom", []):
        if "configMapRef" in ef:
            config.update(rendered_cm.get(ef["configMapRef"]["name"], {}))
    config.update({k: v for k, v in example.items()})
    known = known_variables()
    for key in sorted(config):
        check(key in known, f"{key} is a crcr variable (docs/configuration.md)")

    keyfile = config.get("GITHUB_APP_PRIVATE_KEY_FILE")
    check(keyfile in files, f"GITHUB_APP_PRIVATE_KEY_FILE={keyfile} is a mounted file "
          f"({files.get(keyfile, 'not mounted')})")
    store = urllib.parse.urlsplit(example.get("CRCR_STORE", ""))
    params = urllib.parse.parse_qs(store.query)
    check(store.scheme in ("postgresql", "postgres"), "CRCR_STORE is a PostgreSQL URI")
    check(params.get("sslmode") == ["verify-full"], "CRCR_STORE has sslmode=verify-full")
    root_cert = (params.get("sslrootcert") or [None])[0]
    check(root_cert in files, f"CRCR_STORE's sslrootcert={root_cert} is a mounted file "
          f"({files.get(root_cert, 'not mounted')})")

    # -- probes and the objects around the Deployment -------------------------------------------
    ports = {p.get("name") for p in c.get("ports", [])} | {p["containerPort"] for p in c.get("ports", [])}
    probes = {k: c.get(k, {}).get("httpGet", {}) for k in ("readinessProbe", "livenessProbe",
                                                            "startupProbe")}
    check(probes["readinessProbe"].get("path") == "/readyz", "readiness probe on /readyz")
    check(probes["livenessProbe"].get("path") == "/healthz",
          "liveness probe on /healthz (a database outage must not restart replicas)")
    for k, p in probes.items():
        if p:
            check(p.get("port") in ports, f"{k} port {p.get('port')} is a container port")
    listen_port = int(str(config.get("CRCR_LISTEN", ":8000")).rsplit(":", 1)[1])
    check(listen_port in ports, f"CRCR_LISTEN's port {listen_port} is the container port")
    labels = pod["metadata"]["labels"]
    check(all(labels.get(k) == v for k, v in dep["spec"]["selector"]["matchLabels"].items()),
          "the Deployment's selector matches its pods")
    services = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    for s in services.values():
        check(all(labels.get(k) == v for k, v in s["spec"]["selector"].items()),
              f"Service {s['metadata']['name']} selects the pods")
        for p in s["spec"]["ports"]:
            check(p.get("targetPort") in ports, f"Service port {p.get('name')} targets a container port")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        check(all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items()),
              "the PodDisruptionBudget selects the pods")
    for ing in by_kind.get("Ingress", []):
        for rule in ing["spec"].get("rules", []):
            for path in rule.get("http", {}).get("paths", []):
                svc = path["backend"]["service"]
                s = services.get(svc["name"])
                port_ok = s is not None and any(
                    p.get("name") == svc["port"].get("name") or p.get("port") == svc["port"].get("number")
                    for p in s["spec"]["ports"])
                check(port_ok, f"Ingress path {path['path']} goes to an existing Service port")
                check(path["path"] not in ("/healthz", "/readyz", "/metrics"),
                      f"Ingress path {path['path']} is not an internal endpoint")

    # -- the PostgreSQL connection budget -----------------------------------------------------------
    replicas = as_int(dep["spec"].get("replicas", 1), "replicas")
    strategy = dep["spec"].get("strategy", {})
    surge = as_int(strategy.get("rollingUpdate", {}).get("maxSurge", 0)
                   if strategy.get("type", "RollingUpdate") == "RollingUpdate" else 0, "maxSurge")
    # Outbox worker threads at most (src/relay/outbox.c OUTBOX_THREADS_MAX): the ones that use
    # store connections; rows in flight (MAX_DISPATCH_WORKERS) hold none.
    workers = 8
    threads = as_int(config.get("CRCR_HTTP_THREADS", "0"), "CRCR_HTTP_THREADS")
    pool = as_int(config.get("CRCR_STORE_POOL", "0"), "CRCR_STORE_POOL")
    hud = as_int(config.get("CRCR_HUD_CONCURRENCY", "2"), "CRCR_HUD_CONCURRENCY")
    if None in (replicas, surge, workers, threads, pool, hud):
        return 1
    check(threads > 0, f"CRCR_HTTP_THREADS is explicit ({threads}), not sized from the node's CPUs")
    check(pool > 0, f"CRCR_STORE_POOL is explicit ({pool}), not sized from the node's CPUs")
    check(pool >= workers + threads + hud + 2,
          f"CRCR_STORE_POOL {pool} >= outbox threads {workers} + CRCR_HTTP_THREADS {threads}"
          f" + CRCR_HUD_CONCURRENCY {hud} + 2 (no worker waits for a connection)")
    peak = (replicas + surge) * (pool + 1)
    budget = PG_MAX_CONNECTIONS - PG_SUPERUSER_RESERVED - HEADROOM
    check(peak <= budget,
          f"(replicas {replicas} + maxSurge {surge}) x (pool {pool} + 1) = {peak} <= "
          f"max_connections {PG_MAX_CONNECTIONS} - reserved {PG_SUPERUSER_RESERVED} - "
          f"headroom {HEADROOM} = {budget}")

    # -- kubectl accepts the documented Secret file ------------------------------------------------
    kubectl = find_kubectl()
    if kubectl:
        p = subprocess.run([kubectl, "-n", "crcr", "create", "secret", "generic", "crcr-secrets",
                            f"--from-env-file={SECRETS_EXAMPLE}", "--dry-run=client", "-o", "yaml"],
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, "kubectl create secret --from-env-file accepts secrets.env.example"
              + (f": {p.stderr.strip()}" if p.returncode else ""))

    print(f"check-kubernetes: {results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
