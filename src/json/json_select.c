/*
 * json_select.c - jv_parse_select(); see json.h.
 *
 * jv_parse_select() is the webhook handler's parser. The handler reads about a dozen paths of a
 * body it forwards verbatim, yet a full json_loadb() of a 30 KB pull_request payload allocates
 * ~1,000 values and costs about 1 ms of CPU, a quarter of crcr's CPU per webhook
 * (bench/RESULTS.md). jansson has no streaming or selective API, and Debian 12 has no faster
 * validating parser that also refuses duplicate keys (json-c keeps the last one, cJSON the first
 * and truncates integers). So this file has a hand-written validator that gives exactly
 * jv_parse()'s accept/reject answer and hands only the selected values to jansson:
 *
 *   - One pass, no recursion: an explicit stack of CRCR_JSON_MAX_DEPTH frames (a deeper
 *     document is refused, as jv_prescan() refuses it) and a state machine (value, after a
 *     value, key). Values are counted as jv_prescan() counts them (keys, strings, numbers,
 *     literals, containers), against CRCR_JSON_MAX_VALUES.
 *   - jansson's rules, from its load.c and utf.c (2.14): whitespace is space, tab, CR and LF;
 *     any value may be the root, then only whitespace; strings refuse control characters,
 *     unknown escapes, short \u escapes, lone or reversed surrogates, \u0000 (in values, without
 *     JSON_ALLOW_NUL, and in keys, always) and ill-formed UTF-8 (overlong forms, surrogates,
 *     beyond U+10FFFF); numbers follow the JSON grammar, integers must fit int64 (strtoll's
 *     ERANGE) and reals must not round to infinity (strtod's overflow; underflow is accepted).
 *     One quirk is reproduced on purpose: jansson loses a NUL byte it pushes back after a number
 *     or literal, so "[1\0]" parses; accepting it too keeps both parsers' answers equal.
 *   - Duplicate keys are refused at every level, compared byte for byte after unescaping ("a"
 *     and "\u0061" are the same key). The keys of all open objects form one stack of 32-byte
 *     entries (offset and lengths in the text, hash); an object's keys are contiguous and are
 *     dropped when it closes. One chained hash table indexes the stack (SipHash-1-3 with a
 *     per-process random key, so no input can crowd one chain); chains are newest first,
 *     so a lookup stops at the first key of an enclosing object and a closing object unlinks its
 *     keys from the chain heads. Keys are compared by hash and unescaped length first, then by
 *     decoding both literals from the text; nothing is copied. The stack holds at most
 *     CRCR_JSON_MAX_VALUES entries (every key is a counted value): 16 MB in the worst case,
 *     against ~125 MB for jv_parse() of the same document.
 *   - Selection: the dotted paths become a small tree (split as jv_path() splits them). An
 *     object on a selected path gets its counterpart in the result; a selected value's byte span
 *     goes to json_loadb() once validated, so the built value is exactly jansson's. jansson
 *     recurses there, on a span whose depth was already checked against CRCR_JSON_MAX_DEPTH.
 *   - Nothing else is allocated: no strings for skipped values, no tree.
 * fuzz/fuzz_json_select.c checks both parsers agree on every input and on the selected values.

 */
#include "json.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "ids.h"
#include "crcr_limits.h"
#include "siphash.h"
#include "utf8.h"

/* ---- jv_parse_select: one validating pass, only the selected values built -------------------- */

#define SEL_SEG_MAX 255u     /* longest key jv_path() can follow (its key buffer is 256 bytes) */
#define SEL_NONE (-1)        /* no selection node */
#define KEY_NONE UINT32_MAX  /* end of a key-set chain */
#define KEYS_MIN_BUCKETS 64u /* first allocation of the key set */
/* Key hashes: SipHash-1-3 under the process key (siphash.h). The keys of an unauthenticated body
 * are the attacker's choice; with an unkeyed hash they can all be made to share one chain, which
 * makes the duplicate check quadratic (16,384 FNV-1a-colliding keys cost 721 ms before). */
#define KEY_HASH_C 1u
#define KEY_HASH_D 3u

/* The smallest decimal that strtod() rounds to infinity: 2^1024 - 2^970, halfway between
 * DBL_MAX and 2^1024 (a tie goes to 2^1024, the even side). jansson refuses such reals. */
static const char real_overflow_digits[] =
    "17976931348623158079372897140530341507993413271003782693617377898044496829276475094664901797"
    "75872070963302864166928879109465555478519404026306574886715058206819089020007083836762738548"
    "45817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711"
    "559699508093042880177904174497792";
#define REAL_OVERFLOW_EXP10 308 /* real_overflow_digits is 1.79...e308 */

/* One node of the selection: a path segment, its children, and whether a path ends here. */
typedef struct sel_node {
    const char *seg; /* borrowed from the caller's path, not NUL-terminated */
    size_t seglen;
    bool terminal;
    int child; /* first child, SEL_NONE if none */
    int next;  /* next sibling, SEL_NONE if none */
} sel_node;

/* A key of an open object: where it is in the text, its length after unescaping and its hash.
 * `next` chains keys of the same bucket, newest first. */
typedef struct key_ent {
    size_t off; /* first byte after the opening quote */
    size_t
        rawlen; /* bytes up to the closing quote; equals declen exactly when there is no escape */
    size_t declen;
    uint32_t hash;
    uint32_t next;
} key_ent;

/* The keys of every open object, as one stack: an object's keys are contiguous from its frame's
 * keys_start, nested objects' keys above them, dropped when they close. */
typedef struct key_set {
    key_ent *ents;
    size_t n, cap;
    uint32_t *heads; /* nbuckets chain heads (a power of two), KEY_NONE when empty */
    size_t nbuckets;
} key_set;

typedef struct sel_frame {
    bool is_obj;
    size_t keys_start; /* this object's first key in the key set */
    int sel;           /* selection node this object stands at, SEL_NONE if off the selection */
    json_t *out;       /* the result's object for it when sel != SEL_NONE (owned by the result) */
} sel_frame;

typedef struct sel_parser {
    const char *t;
    size_t len;
    size_t pos;
    const sel_node *nodes;
    key_set keys;
    json_t *result;     /* owned until returned */
    bool validate_only; /* jv_validate: nothing is built, not even the root, and keys are not
                           compared (no key set) */
    bool root_is_obj;   /* the document is an object */
} sel_parser;

static size_t skip_ws(const char *t, size_t len, size_t i)
{
    while (i < len && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t'))
        i++;
    return i;
}

/* The value of the 4 hex digits at t[i..i+4), or -1 if they are not (all there and) hex. */
static long hex4(const char *t, size_t len, size_t i)
{
    if (len < 4 || i > len - 4)
        return -1;
    long v = 0;
    for (size_t k = 0; k < 4; k++) {
        int h = ids_hex_value((char)t[i + k]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Encodes a code point (not a surrogate, at most U+10FFFF) into out[0..4); returns the length. */
static unsigned utf8_put(uint32_t cp, unsigned char *out)
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Bytes of a word equal to zero set their high bit in the result; only a byte above such a byte
 * may be set falsely, which makes plain_run() stop early, never skip a byte it must look at. */
#define SWAR_ONES 0x0101010101010101ULL
#define SWAR_HIGH 0x8080808080808080ULL
static inline uint64_t swar_zero(uint64_t x)
{
    return (x - SWAR_ONES) & ~x & SWAR_HIGH;
}

/* Skips the bytes of a string literal from t[i] that need no look (printable ASCII but the quote
 * and the backslash) and returns the index of the first other byte (or len). Most of a webhook's
 * bytes are such runs: a byte at a time, this scan was the largest item of the parse
 * (bench/RESULTS.md). With SSE2 (every x86-64) 16 bytes are judged at once and the first other
 * byte is found exactly: a signed compare with 0x20 catches control characters and every byte
 * from 0x80 alike. Elsewhere 8 at a time (SWAR), stopping at the word that holds the first other
 * byte; the byte loop finds it. */
static size_t plain_run(const char *t, size_t len, size_t i)
{
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                  space = _mm_set1_epi8(0x20);
    while (len - i >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(t + i));
        __m128i special =
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                         _mm_cmplt_epi8(x, space));
        unsigned mask = (unsigned)_mm_movemask_epi8(special);
        if (mask)
            return i + (size_t)__builtin_ctz(mask);
        i += 16;
    }
#endif
    while (len - i >= 8) {
        uint64_t x;
        memcpy(&x, t + i, 8);
        uint64_t special = swar_zero(x ^ (SWAR_ONES * '"')) | swar_zero(x ^ (SWAR_ONES * '\\')) |
                           ((x - SWAR_ONES * 0x20) & ~x) | x;
        if (special & SWAR_HIGH)
            break;
        i += 8;
    }
    unsigned char c;
    while (i < len && (c = (unsigned char)t[i]) >= 0x20 && c != '"' && c != '\\' && c < 0x80)
        i++;
    return i;
}

/* Scans the string literal whose opening quote is at t[*pos] with jansson's rules: no control
 * characters, only its escapes, \u escapes with 4 hex digits, surrogates only as pairs, no
 * \u0000 (refused in keys and values alike), well-formed UTF-8. On success *pos is just past the
 * closing quote, *declen the length after unescaping and, when `hash` is not NULL, *hash the
 * keyed hash of the unescaped bytes. Returns NULL, or the reason with *pos at the fault. */
static const char *scan_string(const char *t, size_t len, size_t *pos, size_t *declen,
                               uint32_t *hash)
{
    size_t i = *pos + 1, n = 0;
    siphash_state h = {0};
    if (hash)
        siphash_init(&h, siphash_process_key(), KEY_HASH_C, KEY_HASH_D);
    for (;;) {
        size_t run = i;
        i = plain_run(t, len, i);
        if (hash)
            siphash_bytes(&h, t + run, i - run);
        n += i - run;
        if (i >= len) {
            *pos = i;
            return "unterminated string";
        }
        unsigned char c = (unsigned char)t[i];
        if (c == '"')
            break;
        if (c < 0x20) {
            *pos = i;
            return "control character in string";
        }
        if (c >= 0x80) {
            /* Characters beyond ASCII come in runs (a word of another script): they are
             * checked one after another here, not each after a call of plain_run. */
            size_t from = i;
            do {
                size_t k = utf8_seq((const unsigned char *)t + i, len - i);
                if (!k) {
                    *pos = i;
                    return "invalid UTF-8";
                }
                i += k;
            } while (i < len && (unsigned char)t[i] >= 0x80);
            if (hash)
                siphash_bytes(&h, t + from, i - from);
            n += i - from;
            continue;
        }
        /* A backslash. */
        unsigned char out[4];
        unsigned olen = 1;
        char e = i + 1 < len ? t[i + 1] : '\0';
        switch (e) {
        case '"':
        case '\\':
        case '/':
            out[0] = (unsigned char)e;
            break;
        case 'b':
            out[0] = '\b';
            break;
        case 'f':
            out[0] = '\f';
            break;
        case 'n':
            out[0] = '\n';
            break;
        case 'r':
            out[0] = '\r';
            break;
        case 't':
            out[0] = '\t';
            break;
        case 'u': {
            long cp = hex4(t, len, i + 2);
            if (cp < 0) {
                *pos = i;
                return "invalid escape";
            }
            if (cp == 0) {
                *pos = i;
                return "\\u0000 is not allowed";
            }
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                *pos = i;
                return "lone low surrogate";
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                long lo = -1;
                if (i + 7 < len && t[i + 6] == '\\' && t[i + 7] == 'u')
                    lo = hex4(t, len, i + 8);
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    *pos = i;
                    return "invalid surrogate pair";
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            olen = utf8_put((uint32_t)cp, out);
            i += 4;
            break;
        }
        default:
            *pos = i;
            return "invalid escape";
        }
        if (hash)
            siphash_bytes(&h, out, olen);
        n += olen;
        i += 2;
    }
    *pos = i + 1;
    *declen = n;
    if (hash)
        *hash = (uint32_t)siphash_final(&h);
    return NULL;
}

/* Reads the unescaped bytes of a string literal that scan_string() accepted, one at a time. */
typedef struct str_dec {
    const char *p, *end;
    unsigned char pend[4]; /* the rest of a multi-byte character from a \u escape */
    unsigned npend, ipend;
} str_dec;

static unsigned char str_dec_next(str_dec *d)
{
    if (d->ipend < d->npend)
        return d->pend[d->ipend++];
    char c = *d->p++;
    if (c != '\\')
        return (unsigned char)c;
    c = *d->p++;
    switch (c) {
    case 'b':
        return '\b';
    case 'f':
        return '\f';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'u':
        break;
    default:
        return (unsigned char)c; /* " \ / */
    }
    long cp = hex4(d->p, 4, 0);
    d->p += 4;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        long lo = hex4(d->p, 6, 2);
        d->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    d->npend = utf8_put((uint32_t)cp, d->pend);
    d->ipend = 1;
    return d->pend[0];
}

/* Whether the raw literal bytes a[0..arawlen) unescape to the same `declen` bytes as b: raw
 * bytes (brawlen == declen) or another literal. Both were accepted by scan_string(). */
static bool str_equal(const char *a, size_t arawlen, const char *b, size_t brawlen, size_t declen)
{
    if (arawlen == declen && brawlen == declen)
        return memcmp(a, b, declen) == 0;
    str_dec da = {a, a + arawlen, {0}, 0, 0};
    str_dec db = {b, b + brawlen, {0}, 0, 0};
    for (size_t k = 0; k < declen; k++) {
        if (str_dec_next(&da) != str_dec_next(&db))
            return false;
    }
    return true;
}

static void keys_free(key_set *ks)
{
    free(ks->ents);
    free(ks->heads);
}

/* Makes room for one more key: entries double (never past CRCR_JSON_MAX_VALUES, which bounds
 * the keys of a document) and buckets are kept at least as many as entries. */
static bool keys_reserve(key_set *ks)
{
    if (ks->n == ks->cap) {
        size_t cap = ks->cap ? ks->cap * 2 : KEYS_MIN_BUCKETS;
        if (cap > CRCR_JSON_MAX_VALUES)
            cap = CRCR_JSON_MAX_VALUES;
        if (cap <= ks->n)
            return false;
        key_ent *e = realloc(ks->ents, cap * sizeof(*e));
        if (!e)
            return false;
        ks->ents = e;
        ks->cap = cap;
    }
    if (ks->n < ks->nbuckets)
        return true;
    size_t nb = ks->nbuckets ? ks->nbuckets * 2 : KEYS_MIN_BUCKETS;
    uint32_t *heads = malloc(nb * sizeof(*heads));
    if (!heads)
        return false;
    for (size_t b = 0; b < nb; b++)
        heads[b] = KEY_NONE;
    /* Re-chaining in stack order keeps every chain newest first. */
    for (size_t k = 0; k < ks->n; k++) {
        size_t b = ks->ents[k].hash & (nb - 1);
        ks->ents[k].next = heads[b];
        heads[b] = (uint32_t)k;
    }
    free(ks->heads);
    ks->heads = heads;
    ks->nbuckets = nb;
    return true;
}

/* Chain steps taken by keys_add on this thread (jv_select_key_probes). */
static _Thread_local uint64_t key_probes;

uint64_t jv_select_key_probes(void)
{
    return key_probes;
}

/* Adds a key to the innermost open object, whose keys start at `start`. Returns 0, 1 when the
 * object already has that key (after unescaping, byte for byte, as jansson compares), or -1 when
 * out of memory. */
static int keys_add(key_set *ks, const char *t, size_t start, size_t off, size_t rawlen,
                    size_t declen, uint32_t hash)
{
    if (ks->nbuckets) {
        /* Chains are newest first: the walk ends at the first key of an enclosing object. */
        for (uint32_t k = ks->heads[hash & (ks->nbuckets - 1)]; k != KEY_NONE && k >= start;
             k = ks->ents[k].next) {
            const key_ent *e = &ks->ents[k];
            key_probes++;
            if (e->hash == hash && e->declen == declen &&
                str_equal(t + e->off, e->rawlen, t + off, rawlen, declen))
                return 1;
        }
    }
    if (!keys_reserve(ks))
        return -1;
    size_t b = hash & (ks->nbuckets - 1);
    ks->ents[ks->n] = (key_ent){off, rawlen, declen, hash, ks->heads[b]};
    ks->heads[b] = (uint32_t)ks->n;
    ks->n++;
    return 0;
}

/* Forgets the keys of the object that closes (those from `start` on), newest first. */
static void keys_pop(key_set *ks, size_t start)
{
    while (ks->n > start) {
        const key_ent *e = &ks->ents[--ks->n];
        ks->heads[e->hash & (ks->nbuckets - 1)] = e->next;
    }
}

/* Whether a real literal is beyond what strtod() can represent (jansson: "real number
 * overflow"). Digits: the integer part int[0..ni) and the fraction frac[0..nf); exp10 is the
 * exponent, saturated. Underflow is no error in jansson, so tiny values are fine. */
static bool real_overflows(const char *ip, size_t ni, const char *fp, size_t nf, long long exp10)
{
    /* Find the first significant digit and the power of ten it stands for. */
    size_t at = 0; /* its index in the digit sequence int part + fraction */
    long long e;
    if (ni > 1 || ip[0] != '0') { /* no leading zeros in JSON: a non-zero int part starts it */
        e = (long long)ni - 1;
    } else {
        size_t k = 0;
        while (k < nf && fp[k] == '0')
            k++;
        if (k == nf)
            return false; /* zero */
        at = ni + k;
        e = -(long long)k - 1;
    }
    e += exp10;
    if (e != REAL_OVERFLOW_EXP10)
        return e > REAL_OVERFLOW_EXP10;
    /* Same magnitude: compare the digits with the threshold's. */
    const size_t nthr = sizeof(real_overflow_digits) - 1;
    size_t m = 0;
    for (size_t k = at; k < ni + nf; k++) {
        char c = k < ni ? ip[k] : fp[k - ni];
        if (m < nthr) {
            if (c != real_overflow_digits[m])
                return c > real_overflow_digits[m];
            m++;
        } else if (c != '0') {
            return true;
        }
    }
    for (; m < nthr; m++) {
        if (real_overflow_digits[m] != '0')
            return false; /* the literal ran out of digits first: it is smaller */
    }
    return true; /* equal: the tie rounds to infinity */
}

/* Scans a number at t[*pos] with jansson's grammar (no leading zeros, no '+', digits on both
 * sides of '.', an exponent with digits). Integers must fit int64 and reals must not overflow
 * a double, as jansson requires. On success *pos is just past it. */
static const char *scan_number(const char *t, size_t len, size_t *pos)
{
    size_t i = *pos;
    bool neg = false;
    if (t[i] == '-') {
        neg = true;
        i++;
    }
    size_t is = i;
    if (i >= len || t[i] < '0' || t[i] > '9')
        return "invalid number";
    if (t[i] == '0') {
        i++;
        if (i < len && t[i] >= '0' && t[i] <= '9')
            return "invalid number";
    } else {
        while (i < len && t[i] >= '0' && t[i] <= '9')
            i++;
    }
    size_t ie = i, fs = i, fe = i;
    bool real = false;
    long long exp10 = 0;
    if (i < len && t[i] == '.') {
        real = true;
        fs = ++i;
        if (i >= len || t[i] < '0' || t[i] > '9')
            return "invalid number";
        while (i < len && t[i] >= '0' && t[i] <= '9')
            i++;
        fe = i;
    }
    if (i < len && (t[i] == 'e' || t[i] == 'E')) {
        real = true;
        i++;
        bool eneg = false;
        if (i < len && (t[i] == '+' || t[i] == '-'))
            eneg = t[i++] == '-';
        if (i >= len || t[i] < '0' || t[i] > '9')
            return "invalid number";
        while (i < len && t[i] >= '0' && t[i] <= '9') {
            if (exp10 < 1000000000000LL) /* saturate: far beyond any double either way */
                exp10 = exp10 * 10 + (t[i] - '0');
            i++;
        }
        if (eneg)
            exp10 = -exp10;
    }
    *pos = i;
    if (real)
        return real_overflows(t + is, ie - is, t + fs, fe - fs, exp10) ? "real number overflow"
                                                                       : NULL;
    if (ie - is > 19)
        return "integer out of range"; /* >= 10^19 > 2^63 */
    uint64_t v = 0;
    for (size_t k = is; k < ie; k++)
        v = v * 10 + (uint64_t)(t[k] - '0');
    if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
        return "integer out of range";
    return NULL;
}

/* The child of selection node `parent` named by the key literal raw[0..rawlen), or SEL_NONE. */
static int sel_child(const sel_node *nodes, int parent, const char *raw, size_t rawlen,
                     size_t declen)
{
    for (int c = nodes[parent].child; c != SEL_NONE; c = nodes[c].next) {
        if (nodes[c].seglen == declen && str_equal(raw, rawlen, nodes[c].seg, declen, declen))
            return c;
    }
    return SEL_NONE;
}

/* Builds the selection tree from the paths, splitting them as jv_path() does. Node 0 is the
 * root. A path with a segment jv_path() could never follow (longer than SEL_SEG_MAX) is left
 * out: it is absent from any result, as jv_path() finds nothing. Returns false when the
 * selection is not valid. */
static bool sel_build(sel_node *nodes, const char *const *paths, size_t n_paths)
{
    size_t n = 1;
    nodes[0] = (sel_node){NULL, 0, false, SEL_NONE, SEL_NONE};
    if (n_paths > CRCR_JSON_SELECT_MAX_PATHS || (n_paths && !paths))
        return false;
    for (size_t k = 0; k < n_paths; k++) {
        const char *p = paths[k];
        if (!p || !*p)
            return false;
        bool followable = true;
        for (const char *q = p; *q;) {
            const char *dot = strchr(q, '.');
            size_t sl = dot ? (size_t)(dot - q) : strlen(q);
            if (sl > SEL_SEG_MAX)
                followable = false;
            q += sl;
            if (*q == '.')
                q++;
        }
        if (!followable)
            continue;
        int cur = 0;
        while (*p) {
            const char *dot = strchr(p, '.');
            size_t sl = dot ? (size_t)(dot - p) : strlen(p);
            int c = nodes[cur].child;
            while (c != SEL_NONE && (nodes[c].seglen != sl || memcmp(nodes[c].seg, p, sl) != 0))
                c = nodes[c].next;
            if (c == SEL_NONE) {
                if (n > CRCR_JSON_SELECT_MAX_SEGMENTS)
                    return false;
                c = (int)n++;
                nodes[c] = (sel_node){p, sl, false, SEL_NONE, nodes[cur].child};
                nodes[cur].child = c;
            }
            cur = c;
            p += sl;
            if (*p == '.')
                p++;
        }
        nodes[cur].terminal = true;
    }
    return true;
}

/* The string literal t[start..end) (quotes included, accepted by scan_string) as a jansson
 * string. Decoded here rather than by json_loadb: jansson's lexer reads a byte at a time through
 * its stream layer, and a webhook's pull_request.body (29 KB in the bench's 30 KB webhook) took 86
 * of the 114 us that the selective parse cost (bench/json_select_bench.c: 114 -> 26 us). Runs
 * without a backslash are copied whole; escapes go through str_dec_next, as keys do. The bytes
 * were checked by scan_string (UTF-8, escapes, no \u0000), as jansson would check them. Returns
 * NULL when out of memory. */
static json_t *sel_string(const char *t, size_t start, size_t end)
{
    const char *s = t + start + 1, *e = t + end - 1;
    char *buf = malloc((size_t)(e - s) + 1); /* the decoded text is never longer than the raw */
    if (!buf)
        return NULL;
    size_t n = 0;
    while (s < e) {
        const char *bs = memchr(s, '\\', (size_t)(e - s));
        size_t run = (size_t)((bs ? bs : e) - s);
        memcpy(buf + n, s, run);
        n += run;
        s += run;
        if (!bs)
            break;
        str_dec d = {s, e, {0}, 0, 0};
        buf[n++] = (char)str_dec_next(&d);
        while (d.ipend < d.npend)
            buf[n++] = (char)d.pend[d.ipend++];
        s = d.p;
    }
    json_t *v = json_stringn_nocheck(buf, n);
    free(buf);
    return v;
}

/* Adds the value t[start..end) (accepted by the validator) to `out` under the selection node's
 * key, or makes it the result when `out` is NULL. A string is decoded by sel_string, anything
 * else built by jansson: exactly what jv_parse() would have built (fuzz_json_select checks). */
static const char *sel_capture(sel_parser *p, size_t start, size_t end, const sel_node *node,
                               json_t *out)
{
    json_error_t e;
    json_t *v;
    if (end - start >= 2 && p->t[start] == '"' && p->t[end - 1] == '"') {
        v = sel_string(p->t, start, end);
        if (!v)
            return "out of memory";
    } else {
        v = json_loadb(p->t + start, end - start, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);
    }
    if (!v)
        return "selected value refused by jansson"; /* a validator bug: fail closed */
    if (!out) {
        p->result = v;
        return NULL;
    }
    return json_object_setn_new(out, node->seg, node->seglen, v) == 0 ? NULL : "out of memory";
}

enum { SEL_ST_VALUE, SEL_ST_AFTER, SEL_ST_KEY };

/* The validating pass. Returns NULL when the document is valid (p->result then holds the
 * selection), or the reason it is not, with p->pos near the fault. */
static const char *sel_run(sel_parser *p)
{
    const char *t = p->t;
    const size_t len = p->len;
    const sel_node *nodes = p->nodes;
    sel_frame st[CRCR_JSON_MAX_DEPTH];
    size_t depth = 0;
    unsigned long values = 0;
    int pending = SEL_NONE;    /* the selection node the last key named, for its value */
    int cap = SEL_NONE;        /* the node whose value is being captured */
    size_t cap_start = 0;      /* where that value starts */
    size_t cap_depth = 0;      /* frames open when it started */
    json_t *cap_out = NULL;    /* where it goes (NULL: it is the result) */
    bool after_scalar = false; /* the value just read was a number or a literal */
    int state = SEL_ST_VALUE;
    size_t i = skip_ws(t, len, 0);
    const char *why = NULL;

    for (;;) {
        p->pos = i;
        if (state == SEL_ST_VALUE) {
            if (i >= len)
                return "value expected";
            if (++values > CRCR_JSON_MAX_VALUES)
                return "JSON nesting or size limit exceeded";
            int node = pending;
            pending = SEL_NONE;
            char c = t[i];
            bool root_scalar = depth == 0 && c != '{' && c != '[';
            if (root_scalar)
                node = 0; /* captured with no parent object: the result is the scalar itself */
            if (!p->validate_only && (root_scalar || (node != SEL_NONE && nodes[node].terminal))) {
                cap = node;
                cap_start = i;
                cap_depth = depth;
                cap_out = depth ? st[depth - 1].out : NULL;
            }
            if (c == '{' || c == '[') {
                if (depth >= CRCR_JSON_MAX_DEPTH)
                    return "JSON nesting or size limit exceeded";
                sel_frame *f = &st[depth];
                *f = (sel_frame){c == '{', p->keys.n, SEL_NONE, NULL};
                if (depth == 0)
                    p->root_is_obj = f->is_obj;
                if (p->validate_only) {
                    /* nothing to build: every frame stays off the selection */
                } else if (f->is_obj && depth == 0) {
                    p->result = json_object();
                    if (!p->result)
                        return "out of memory";
                    f->sel = 0;
                    f->out = p->result;
                } else if (f->is_obj && node != SEL_NONE && !nodes[node].terminal) {
                    json_t *o = json_object();
                    if (!o || json_object_setn_new(st[depth - 1].out, nodes[node].seg,
                                                   nodes[node].seglen, o) != 0)
                        return "out of memory";
                    f->sel = node;
                    f->out = o;
                } else if (!f->is_obj && depth == 0) {
                    p->result = json_array();
                    if (!p->result)
                        return "out of memory";
                }
                depth++;
                i = skip_ws(t, len, i + 1);
                if (i < len && t[i] == (f->is_obj ? '}' : ']')) {
                    i++;
                    depth--;
                    after_scalar = false;
                    state = SEL_ST_AFTER;
                } else {
                    state = f->is_obj ? SEL_ST_KEY : SEL_ST_VALUE;
                }
                continue;
            }
            if (c == '"') {
                size_t dl;
                why = scan_string(t, len, &i, &dl, NULL);
                after_scalar = false;
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                why = scan_number(t, len, &i);
                after_scalar = true;
            } else {
                static const char *const lits[] = {"true", "false", "null"};
                size_t k = 0;
                while (k < 3 && lits[k][0] != c)
                    k++;
                size_t n = k < 3 ? strlen(lits[k]) : 0;
                if (k == 3 || len - i < n || memcmp(t + i, lits[k], n) != 0)
                    return "invalid token";
                i += n;
                if (i < len && ((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z')))
                    return "invalid token";
                after_scalar = true;
            }
            if (why) {
                p->pos = i;
                return why;
            }
            state = SEL_ST_AFTER;
        } else if (state == SEL_ST_AFTER) {
            if (cap != SEL_NONE && depth == cap_depth) {
                why = sel_capture(p, cap_start, i, &nodes[cap], cap_out);
                if (why)
                    return why;
                cap = SEL_NONE;
            }
            /* jansson quirk, kept for the same answers: the byte after a number or literal is
             * read and pushed back, and a pushed-back NUL byte is lost, so one NUL there is
             * skipped ("[1\0]" is accepted). */
            if (after_scalar && i < len && t[i] == '\0')
                i++;
            after_scalar = false;
            i = skip_ws(t, len, i);
            p->pos = i;
            if (depth == 0)
                return i == len ? NULL : "end of input expected";
            sel_frame *f = &st[depth - 1];
            if (i >= len)
                return f->is_obj ? "',' or '}' expected" : "',' or ']' expected";
            if (t[i] == ',') {
                i = skip_ws(t, len, i + 1);
                state = f->is_obj ? SEL_ST_KEY : SEL_ST_VALUE;
            } else if (t[i] == (f->is_obj ? '}' : ']')) {
                if (f->is_obj)
                    keys_pop(&p->keys, f->keys_start);
                depth--;
                i++;
            } else {
                return f->is_obj ? "',' or '}' expected" : "',' or ']' expected";
            }
        } else { /* SEL_ST_KEY */
            if (i >= len || t[i] != '"')
                return "string expected";
            if (++values > CRCR_JSON_MAX_VALUES)
                return "JSON nesting or size limit exceeded";
            sel_frame *f = &st[depth - 1];
            size_t off = i + 1, dl = 0;
            uint32_t h = 0;
            why = scan_string(t, len, &i, &dl, p->validate_only ? NULL : &h);
            if (why) {
                p->pos = i;
                return why;
            }
            size_t rawlen = i - 1 - off;
            int r = p->validate_only ? 0 : keys_add(&p->keys, t, f->keys_start, off, rawlen, dl, h);
            if (r != 0)
                return r > 0 ? "duplicate object key" : "out of memory";
            if (f->sel != SEL_NONE)
                pending = sel_child(nodes, f->sel, t + off, rawlen, dl);
            i = skip_ws(t, len, i);
            p->pos = i;
            if (i >= len || t[i] != ':')
                return "':' expected";
            i = skip_ws(t, len, i + 1);
            state = SEL_ST_VALUE;
        }
    }
}

bool jv_validate(const char *text, size_t len, bool *is_object, char *err, size_t errsz)
{
    sel_node root = {NULL, 0, false, SEL_NONE, SEL_NONE};
    if (is_object)
        *is_object = false;
    if (!text) {
        if (err && errsz)
            snprintf(err, errsz, "no input");
        return false;
    }
    sel_parser p = {.t = text, .len = len, .nodes = &root, .validate_only = true};
    const char *why = sel_run(&p);
    keys_free(&p.keys);
    if (why) {
        if (err && errsz)
            snprintf(err, errsz, "%s at byte %zu", why, p.pos);
        return false;
    }
    if (is_object)
        *is_object = p.root_is_obj;
    return true;
}

jv *jv_parse_select(const char *text, size_t len, const char *const *paths, size_t n_paths,
                    char *err, size_t errsz)
{
    sel_node nodes[CRCR_JSON_SELECT_MAX_SEGMENTS + 1];
    if (!text || !sel_build(nodes, paths, n_paths)) {
        if (err && errsz)
            snprintf(err, errsz, "%s", text ? "invalid selection" : "no input");
        return NULL;
    }
    sel_parser p = {.t = text, .len = len, .nodes = nodes};
    const char *why = sel_run(&p);
    keys_free(&p.keys);
    if (why) {
        json_decref(p.result);
        if (err && errsz)
            snprintf(err, errsz, "%s at byte %zu", why, p.pos);
        return NULL;
    }
    return p.result;
}

/* ---- jv_member_span: where a top-level member's value lies in a validated text -------------- */

/* The index just past the string whose opening quote is at t[i], or len when it is not closed.
 * A quote ends the string when an even number of backslashes precedes it. */
static size_t span_skip_string(const char *t, size_t len, size_t i)
{
    for (size_t k = i + 1; k < len;) {
        const char *q = memchr(t + k, '"', len - k);
        if (!q)
            return len;
        size_t at = (size_t)(q - t), bs = 0;
        while (at - bs > i + 1 && t[at - bs - 1] == '\\')
            bs++;
        if (bs % 2 == 0)
            return at + 1;
        k = at + 1;
    }
    return len;
}

/* The index just past the value starting at t[i] (len when the text ends inside it). */
static size_t span_skip_value(const char *t, size_t len, size_t i)
{
    if (i >= len)
        return len;
    if (t[i] == '"')
        return span_skip_string(t, len, i);
    if (t[i] != '{' && t[i] != '[') { /* number or literal: up to a delimiter */
        while (i < len && !strchr(",}] \t\r\n", t[i]))
            i++;
        return i;
    }
    size_t depth = 0;
    while (i < len) {
        char ch = t[i];
        if (ch == '"') {
            i = span_skip_string(t, len, i);
            continue;
        }
        if (ch == '{' || ch == '[')
            depth++;
        else if ((ch == '}' || ch == ']') && --depth == 0)
            return i + 1;
        i++;
    }
    return len;
}

bool jv_member_span(const char *text, size_t len, const char *key, size_t *off, size_t *n)
{
    size_t klen = strlen(key);
    size_t i = skip_ws(text, len, 0);
    if (i >= len || text[i] != '{')
        return false;
    i = skip_ws(text, len, i + 1);
    while (i < len && text[i] == '"') {
        size_t kend = span_skip_string(text, len, i); /* past the closing quote */
        bool match = kend - i - 2 == klen && memcmp(text + i + 1, key, klen) == 0;
        i = skip_ws(text, len, kend);
        if (i >= len || text[i] != ':')
            return false;
        size_t v = skip_ws(text, len, i + 1);
        size_t vend = span_skip_value(text, len, v);
        if (vend <= v || vend > len)
            return false;
        if (match) {
            *off = v;
            *n = vend - v;
            return true;
        }
        i = skip_ws(text, len, vend);
        if (i >= len || text[i] != ',')
            return false;
        i = skip_ws(text, len, i + 1);
    }
    return false;
}
