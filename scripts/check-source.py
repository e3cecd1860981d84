#!/usr/bin/env python3
"""Source rules CI enforces on the C code.

1. Banned functions (curl's list): sprintf, vsprintf, strcpy, strcat, strncpy, strtok, atoi,
   sscanf, gmtime, localtime.
2. No memcmp/strcmp/strncmp/strcasecmp on secrets: a comparison call whose arguments mention a
   secret-looking identifier (secret, token, signature, hmac, mac, digest, password, bearer,
   private_key) fails; use CRYPTO_memcmp. String literals and comments are ignored.
3. clang-format: every C file is formatted as .clang-format says (skipped with --no-format).
4. Layers: the folders of src/ are the layers (LAYERS below); no #include "x.h" goes up them; on
   the isolated layer (the front doors) an include stays within the file's family; a file in a
   folder that is not a layer is a problem too.
   `--self-test` shows the check failing on a deliberate upward include in a scratch tree.
"""
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIRS = ["src", "tests/unit", "fuzz", "bench"]
BANNED = re.compile(r"\b(sprintf|vsprintf|strcpy|strcat|strncpy|strtok|atoi|sscanf|gmtime|localtime)\s*\(")
COMPARE = re.compile(r"\b(memcmp|strcmp|strncmp|strcasecmp|strncasecmp)\s*\(([^;]*)")
SECRETY = re.compile(r"(secret|token|signature|hmac|\bmac\b|digest|password|bearer|private_key)", re.I)


def strip_literals(text):
    """Blanks out comments, string and char literals, keeping line structure."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * max(0, j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# The layers are the folders of src/ (docs/internals.md has a paragraph per folder). A file may
# include a header of its own layer or below, never above. The front doors (endpoints, hud, cli)
# are one isolated layer: there an include stays within the file's family, the folder and the
# part of the file's name before its first '_' (hud_model.h within hud/, report.h from
# report_send.c), so a command never reaches into another nor an endpoint into another.
LAYERS = {
    "core": 0,        # buffers, clock, logs, metrics, ids, HMAC, HTML escaping: nothing of the relay
    "json": 1,        # jansson behind json.h, the selective parse, the JSON writer, bounded YAML
    "model": 2,       # the relay's vocabularies: outbox kinds and states, run states, conclusions
    "config": 3,      # settings, URLs, the allowlist format
    "net": 4,         # HTTP server (libmicrohttpd) and client (libcurl)
    "github": 5,      # the App, REST, contents, dispatch envelope, check runs, OIDC, callback token
    "store": 6,       # the store interface and the run state machine
    "store/sqlite": 6,
    "store/pg": 6,
    "relay": 7,       # outbox, run effects, sweeper, health, trust, reconciler, the relay's context
    "endpoints": 8,   # front doors (isolated)
    "hud": 8,
    "cli": 8,
    ".": 9,           # the programs: app.c (crcr serve) and main.c
}
ISOLATED = 8


def layer_of(rel):
    """(layer, folder) of a path relative to src/, or (None, folder) for a folder not in LAYERS."""
    folder = str(rel.parent)
    return LAYERS.get(folder), folder


def family_of(rel):
    return (str(rel.parent), rel.stem.split("_")[0])


def check_layers(src):
    """Problems of the include rule over the .c/.h files under `src` (see LAYERS)."""
    problems = []
    files = sorted(p for p in src.rglob("*") if p.suffix in (".c", ".h"))
    by_name = {}
    for path in files:
        by_name.setdefault(path.name, []).append(path.relative_to(src))
    for name, rels in by_name.items():
        if len(rels) > 1:
            problems.append(f"{name}: more than one file of that name ({', '.join(map(str, rels))})")
    for path in files:
        rel = path.relative_to(src)
        layer, folder = layer_of(rel)
        if layer is None:
            problems.append(f"{rel}: folder {folder}/ is not a layer of scripts/check-source.py")
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            target = by_name.get(pathlib.Path(inc).name)
            if not target or pathlib.Path(inc).stem == path.stem:
                continue
            irel = target[0]
            il, ifolder = layer_of(irel)
            if il is None:
                continue  # reported for that file
            lineno = text.count("\n", 0, m.start()) + 1
            if il > layer:
                problems.append(f"{rel}:{lineno}: includes {irel} (layer {il}, {ifolder}/) from layer "
                                f"{layer} ({folder}/): an include must go down the layers")
            elif il == layer == ISOLATED and family_of(irel) != family_of(rel):
                problems.append(f"{rel}:{lineno}: includes {irel}: a front door includes only "
                                f"within its family ({family_of(rel)[0]}/{family_of(rel)[1]}*)")
    return problems


def self_test():
    """The layer check fails on a deliberate upward include and passes without it."""
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp)
        for d in ("core", "relay", "hud", "endpoints", "mystery"):
            (src / d).mkdir()
        (src / "core" / "buf.h").write_text("/* foundation */\n")
        (src / "relay" / "outbox.h").write_text('#include "buf.h"\n')
        (src / "hud" / "hud_model.h").write_text('#include "outbox.h"\n')
        (src / "hud" / "hud_pr.c").write_text('#include "hud_model.h"\n#include "buf.h"\n')
        clean = check_layers(src)
        (src / "core" / "buf.c").write_text('#include "buf.h"\n#include "outbox.h"\n')  # upward
        (src / "endpoints" / "webhook.c").write_text('#include "hud_model.h"\n')  # across families
        (src / "mystery" / "x.c").write_text("\n")
        broken = check_layers(src)
    want = ["core/buf.c:2: includes relay/outbox.h (layer 7, relay/) from layer 0",
            "endpoints/webhook.c:1: includes hud/hud_model.h: a front door includes only",
            "mystery/x.c: folder mystery/ is not a layer"]
    ok = clean == [] and len(broken) == 3 and all(any(w in b for b in broken) for w in want)
    print("check-source self-test:", "ok" if ok else "FAILED")
    for b in broken:
        print("  caught:", b)
    if clean:
        print("  unexpected:", clean)
    return 0 if ok else 1


def main():
    if "--self-test" in sys.argv:
        return self_test()
    files = sorted(p for d in DIRS for p in (ROOT / d).glob("**/*") if p.suffix in (".c", ".h"))
    problems = []
    for path in files:
        code = strip_literals(path.read_text(encoding="utf-8", errors="replace"))
        for lineno, line in enumerate(code.splitlines(), 1):
            rel = path.relative_to(ROOT)
            m = BANNED.search(line)
            if m:
                problems.append(f"{rel}:{lineno}: banned function {m.group(1)}()")
            for m in COMPARE.finditer(line):
                if SECRETY.search(m.group(2)):
                    problems.append(f"{rel}:{lineno}: {m.group(1)}() on a secret; use CRYPTO_memcmp")
    if "--no-format" not in sys.argv:
        fmt = subprocess.run(["clang-format", "--dry-run", "-Werror", *map(str, files)],
                             capture_output=True, text=True)
        if fmt.returncode != 0:
            problems.append("clang-format: files are not formatted (run clang-format -i):\n" + fmt.stderr[-4000:])
    problems += ["layers: " + p for p in check_layers(ROOT / "src")]
    for p in problems:
        print(p)
    print(f"check-source: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
