#!/usr/bin/env python3
"""Source rules CI enforces on the C code.

1. Banned functions (curl's list): sprintf, vsprintf, strcpy, strcat, strncpy, strtok, atoi,
   sscanf, gmtime, localtime.
2. No memcmp/strcmp/strncmp/strcasecmp on secrets: a comparison call whose arguments mention a
   secret-looking identifier (secret, token, signature, hmac, mac, digest, password, bearer,
   private_key) fails; use CRYPTO_memcmp. String literals and comments are ignored.
3. clang-format: every C file is formatted as .clang-format says (skipped with --no-format).
4. Layers: no #include "x.h" in src/ goes up the layer table of docs/internals.md; on a layer
   marked isolated (the front doors) an include stays within the file's family; a file missing
   from the table is a problem too.
   `--self-test` shows the check failing on a deliberate upward include in a scratch tree.
"""
import fnmatch
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


def read_layers(doc):
    """(layers, families) from docs/internals.md: [(layer, name, globs)], [(family, globs)]."""
    layers, families, section = [], [], None
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        if section != "Layers" or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        globs = re.findall(r"`([^`]+)`", line)
        if len(cells) == 3 and cells[0].isdigit():
            layers.append((int(cells[0]), cells[1], globs))
        elif len(cells) == 2 and globs and not cells[0].startswith("-") and cells[0] != "family":
            families.append((cells[0], globs))
    return layers, families


def classify(name, table):
    for key, *_, globs in table:
        if any(fnmatch.fnmatch(name, g) for g in globs):
            return key
    return None


def check_layers(src, doc):
    """Problems of the include rule over the .c/.h files in `src` (see the module docstring)."""
    layers, families = read_layers(doc)
    isolated = {n for n, name, _ in layers if "isolated" in name}
    if not layers:
        return [f"{doc}: no layer table under '## Layers'"]
    problems = []
    for path in sorted(p for p in src.glob("*") if p.suffix in (".c", ".h")):
        layer = classify(path.name, layers)
        if layer is None:
            problems.append(f"{path.name}: not in the layer table of docs/internals.md")
            continue
        fam = classify(path.name, families)
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            if not (src / inc).exists() or pathlib.Path(inc).stem == path.stem:
                continue
            lineno = text.count("\n", 0, m.start()) + 1
            il = classify(inc, layers)
            if il is None:
                problems.append(f"{path.name}:{lineno}: {inc} is not in the layer table")
            elif il > layer or (il == layer and layer in isolated and
                                (fam is None or classify(inc, families) != fam)):
                problems.append(f"{path.name}:{lineno}: includes {inc} (layer {il}) from layer "
                                f"{layer}: an include must go down the layers of docs/internals.md")
    return problems


def self_test():
    """The layer check fails on a deliberate upward include and passes without it."""
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp)
        doc = ROOT / "docs" / "internals.md"
        (src / "buf.h").write_text("/* foundation */\n")
        (src / "outbox.h").write_text('#include "buf.h"\n')
        (src / "hud_model.h").write_text('#include "outbox.h"\n')
        (src / "hud_pr.c").write_text('#include "hud_model.h"\n#include "buf.h"\n')
        clean = check_layers(src, doc)
        (src / "buf.c").write_text('#include "buf.h"\n#include "outbox.h"\n')  # upward
        (src / "webhook.c").write_text('#include "hud_model.h"\n')  # across families
        (src / "mystery.c").write_text("\n")
        broken = check_layers(src, doc)
    want = ["buf.c:2: includes outbox.h (layer 3) from layer 0",
            "webhook.c:1: includes hud_model.h (layer 5) from layer 5",
            "mystery.c: not in the layer table"]
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
    problems += ["layers: " + p for p in check_layers(ROOT / "src", ROOT / "docs" / "internals.md")]
    for p in problems:
        print(p)
    print(f"check-source: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
