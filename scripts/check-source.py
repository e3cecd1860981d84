#!/usr/bin/env python3
"""Source rules CI enforces on the C code.

1. Banned functions (curl's list): sprintf, vsprintf, strcpy, strcat, strncpy, strtok, atoi,
   sscanf, gmtime, localtime.
2. No memcmp/strcmp/strncmp/strcasecmp on secrets: a comparison call whose arguments mention a
   secret-looking identifier (secret, token, signature, hmac, mac, digest, password, bearer,
   private_key) fails; use CRYPTO_memcmp. String literals and comments are ignored.
3. clang-format: every C file is formatted as .clang-format says (skipped with --no-format).
"""
import pathlib
import re
import subprocess
import sys

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


def main():
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
    for p in problems:
        print(p)
    print(f"check-source: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
