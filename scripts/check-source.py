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
5. Vocabularies: no outbox kind, outbox state, run status, conclusion or end reason (the name
   tables of src/model/vocab.c) is spelled as a whole string literal in src/ outside src/model/; words
   inside longer literals (SQL, messages) are fine. A literal that equals a word but is another
   concept (a webhook event called check_run, a test count called skipped) carries a marker
   `vocab-ok: <why>` in a comment on its line or the line above. In the store's SQL, every word
   compared with or inserted into a `kind`, `state` or `ended` column must be in the tables.
   `--self-test` shows it failing on a deliberate literal and an unknown SQL word.
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


# ---- vocabularies (rule 5) ----

VOCAB_FILE = pathlib.Path("model") / "vocab.c"
# The name tables of the concepts the rule covers (the model's other tables, such as outcome.c's
# words for people, are not vocabularies of stored data).
VOCAB_TABLES = {"OB_KIND_NAMES": "kind", "OB_STATE_NAMES": "state", "RUN_STATUS_NAMES": "state",
                "CONCLUSION_NAMES": "conclusion", "END_REASON_NAMES": "ended"}
SQL_COLUMNS = ("kind", "state", "ended")  # columns whose SQL words must be in the tables
VOCAB_MARK = re.compile(r"vocab-ok:\s*\S")
C_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def vocab_words(src):
    """{table: set of words} read from src/model/vocab.c's name tables."""
    path = src / VOCAB_FILE
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    out = {}
    for name in VOCAB_TABLES:
        m = re.search(r"\b%s\s*\[[^\]]*\]\s*=\s*\{(.*?)\};" % name, text, re.S)
        out[name] = set(C_STRING.findall(m.group(1))) if m else set()
    return out


def literals(text):
    """(line number, content) of every string literal outside comments and char literals."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if c == '"':
                out.append((line, text[i + 1:j]))
            j += 1
        elif c == "#" and (i == 0 or text[i - 1] == "\n") and text.startswith("include", i + 1):
            j = text.find("\n", i)  # #include "x.h" names a file
            j = n if j < 0 else j
        else:
            j = i + 1
        line += text.count("\n", i, j)
        i = j
    return out


# Joined SQL of one statement: adjacent literals with only blanks and macro names between them.
SQL_RUN = re.compile(r'"(?:[^"\\\n]|\\.)*"(?:(?:\s|\b[A-Z_][A-Z0-9_]*\b)*"(?:[^"\\\n]|\\.)*")*')
SQL_CMP = re.compile(r"\b(kind|state|ended)\s*(?:=|<>|!=)\s*'([^']*)'", re.I)
SQL_IN = re.compile(r"\b(kind|state|ended)\s+(?:NOT\s+)?IN\s*\(([^)]*)\)", re.I)
SQL_INSERT = re.compile(r"INSERT\s+INTO\s+\w+\s*\(([^)]*)\)\s*VALUES\s*\(([^)]*)\)", re.I)


def sql_words(text):
    """(line, column, word) of every quoted word compared with or inserted into kind/state."""
    out = []
    code = strip_comments(text)
    for m in SQL_RUN.finditer(code):
        line = code.count("\n", 0, m.start()) + 1
        sql = " ".join(C_STRING.findall(m.group(0)))
        for c in SQL_CMP.finditer(sql):
            out.append((line, c.group(1).lower(), c.group(2)))
        for c in SQL_IN.finditer(sql):
            out += [(line, c.group(1).lower(), w) for w in re.findall(r"'([^']*)'", c.group(2))]
        for c in SQL_INSERT.finditer(sql):
            cols = [x.strip().lower() for x in c.group(1).split(",")]
            vals = [x.strip() for x in c.group(2).split(",")]
            for col, val in zip(cols, vals):
                if col in SQL_COLUMNS and val.startswith("'"):
                    out.append((line, col, val.strip("'")))
    return out


def strip_comments(text):
    """Blanks out comments only, keeping line structure and literals."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                  text, flags=re.S)


def check_vocab(src):
    """Problems of rule 5 over the .c/.h files under `src`."""
    tables = vocab_words(src)
    words = set().union(*tables.values())
    if not words:
        return [f"{VOCAB_FILE}: no vocabulary tables found ({', '.join(VOCAB_TABLES)})"]
    allowed = {col: set() for col in SQL_COLUMNS}
    for name, col in VOCAB_TABLES.items():
        if col in allowed:
            allowed[col] |= tables[name]
    problems = []
    for path in sorted(p for p in src.rglob("*") if p.suffix in (".c", ".h")):
        rel = path.relative_to(src)
        if rel.parts[0] == "model":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        for lineno, lit in literals(text):
            if lit not in words:
                continue
            here = lines[lineno - 1] if lineno <= len(lines) else ""
            above = lines[lineno - 2] if lineno >= 2 else ""
            if VOCAB_MARK.search(here) or VOCAB_MARK.search(above):
                continue
            problems.append(f'{rel}:{lineno}: "{lit}" spelled as a literal: use the model\'s '
                            f"name ({VOCAB_FILE}), or mark another concept with vocab-ok: <why>")
        if rel.parts[0] == "store":
            for lineno, col, word in sql_words(text):
                if word not in allowed[col]:
                    problems.append(f"{rel}:{lineno}: SQL {col} '{word}' is not a word of "
                                    f"{VOCAB_FILE}")
    return problems


def self_test():
    """The layer check fails on a deliberate upward include and passes without it; the vocabulary
    check fails on a deliberate literal and an unknown SQL word and passes without them."""
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
    vclean, vbroken = vocab_self_test()
    vwant = ['relay/outbox.c:6: "in_progress" spelled as a literal',
             "store/store_x.c:2: SQL state 'queud' is not a word",
             "store/store_x.c:3: SQL kind 'dispach' is not a word"]
    vok = vclean == [] and len(vbroken) == 3 and all(any(w in b for b in vbroken) for w in vwant)
    print("check-source self-test:", "ok" if ok and vok else "FAILED")
    for b in broken + vbroken:
        print("  caught:", b)
    if clean or vclean:
        print("  unexpected:", clean + vclean)
    return 0 if ok and vok else 1


VOCAB_SELF_TEST_TABLES = (
    'static const char *const OB_KIND_NAMES[2] = {[1] = "dispatch"};\n'
    'static const char *const OB_STATE_NAMES[3] = {[1] = "queued", [2] = "running"};\n'
    'static const char *const RUN_STATUS_NAMES[2] = {[1] = "in_progress"};\n'
    'static const char *const CONCLUSION_NAMES[2] = {[1] = "success"};\n')
# Words inside longer literals, comments, an include and a marked literal: all fine.
VOCAB_SELF_TEST_CLEAN = (
    '#include "dispatch.h"\n'
    'const char *a = "queued up", *b = "in_progress after %s"; /* "running" */\n'
    'int c = \'"\';\n'
    '/* vocab-ok: the webhook event of that name */\n'
    'const char *d = "dispatch";\n')
VOCAB_SELF_TEST_SQL = (
    'const char *q = "UPDATE outbox SET state=\'running\' WHERE kind=\'dispatch\' AND "\n'
    '    "state IN (\'queued\', \'running\')";\n'
    'const char *r = "INSERT INTO outbox(kind, target, state) VALUES (\'dispatch\', ?, "\n'
    '    "\'queued\')";\n')


def vocab_self_test():
    """(problems of a clean scratch tree, problems once it spells words it must not)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp)
        for d in ("model", "relay", "store"):
            (src / d).mkdir()
        (src / "model" / "vocab.c").write_text(VOCAB_SELF_TEST_TABLES)
        (src / "relay" / "outbox.c").write_text(VOCAB_SELF_TEST_CLEAN)
        (src / "store" / "store_x.c").write_text(VOCAB_SELF_TEST_SQL)
        clean = check_vocab(src)
        (src / "relay" / "outbox.c").write_text(
            VOCAB_SELF_TEST_CLEAN + 'const char *e = "in_progress";\n')  # line 6
        (src / "store" / "store_x.c").write_text(
            'const char *q = "SELECT 1";\n'
            'const char *r = "UPDATE outbox SET state=\'queud\'";\n'
            'const char *s = "INSERT INTO outbox(kind, target) VALUES (\'dispach\', ?)";\n')
        broken = check_vocab(src)
    return clean, broken


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
    problems += ["vocabulary: " + p for p in check_vocab(ROOT / "src")]
    for p in problems:
        print(p)
    print(f"check-source: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
