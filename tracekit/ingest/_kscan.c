/*
 * tracekit.ingest._kscan: a one-pass scanner of a Kineto / Chrome-trace ``traceEvents`` array into columns.
 *
 * Why native: the trace is JSON of ~360 bytes per event and hundreds of thousands of events; any
 * reader that builds a Python object (or a generic JSON DOM) per event spends most of its time
 * there. This scanner validates the JSON and writes, per array element, fixed-width columns
 * (route, interned ph/cat/name codes, exact int64 ns ts/dur, pid, tid) and sparse "stores" for
 * the args tracekit reads (one store per arg: rows + values), so Python only assembles arrays.
 *
 * Semantics (the Python side, tracekit/ingest_native.py, documents them for users):
 *  - feed(buffer, final) parses whole elements from the buffer (the bytes after the array's '[',
 *    in order) and returns (consumed, status): NEED (give the unconsumed rest again with more
 *    bytes), END (the array's ']' ends at ``consumed``), ERROR (invalid JSON at error_pos).
 *  - Timestamps: the number's text -> exact int64 ns (value * 1000, rounded half away from zero
 *    below the ns), no double involved; out of int64 range -> "overflow" flag.
 *  - Routing by ph and the lower-cased cat (classes configured from Python) and name "[memory]".
 *  - Strings are validated (escapes, no raw control characters, UTF-8) and unescaped when interned.
 * The GIL is released while a buffer is scanned (the inflater thread runs meanwhile).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ growable buffers */
/* Large buffers live in their own anonymous mappings and grow with mremap: no copy, no 2x peak
 * while growing, and only the pages written count in RSS. Small ones use malloc. */
#ifdef __linux__
#include <sys/mman.h>
#define BIG_BUF ((size_t)1 << 16)
#endif

typedef struct {
    char *p;
    size_t n, cap;
    int mapped;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t c = b->cap ? b->cap : 1024;
    while (c < b->n + extra) c *= 2;
#ifdef __linux__
    if (c >= BIG_BUF) {
        char *q;
        if (b->mapped) {
            q = (char *)mremap(b->p, b->cap, c, MREMAP_MAYMOVE);
            if (q == MAP_FAILED) return -1;
        } else {
            q = (char *)mmap(NULL, c, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (q == MAP_FAILED) return -1;
            if (b->n) memcpy(q, b->p, b->n);
            free(b->p);
            b->mapped = 1;
        }
        b->p = q;
        b->cap = c;
        return 0;
    }
#endif
    char *q = (char *)realloc(b->p, c);
    if (!q) return -1;
    b->p = q;
    b->cap = c;
    return 0;
}
static void buf_free(Buf *b) {
#ifdef __linux__
    if (b->mapped) {
        munmap(b->p, b->cap);
    } else
#endif
        free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    b->mapped = 0;
}

/* ------------------------------------------------------------------ constants */
enum { ST_NEED = 0, ST_END = 1, ST_ERROR = 2 };
enum { R_SKIP_NOTOBJ = 0, R_SKIP_NOTS = 1, R_GPU = 2, R_RUNTIME = 3, R_CPU = 4, R_ANNOT = 5,
       R_MEMORY = 6, R_COUNTERS = 7, R_OTHER = 8 };
/* cat classes (configured from Python: lower-cased cat -> class) */
enum { C_NONE = 0, C_GPU = 1, C_RUNTIME = 2, C_CPU = 3, C_ANNOT = 4, C_AC2G = 5 };
/* ph classes */
enum { P_OTHER = 0, P_X = 1, P_I = 2, P_C = 3, P_S = 4, P_F = 5 };
/* row flags */
#define F_TS_OK 1
#define F_TS_OVF 2
#define F_DUR_OK 4
#define F_DUR_OVF 8
#define F_PID_OK 16
#define F_TID_OK 32
#define F_COERCED 64
/* int stores */
enum { I_EXT, I_CORR, I_DEVICE, I_STREAM, I_REGS, I_SHMEM, I_BYTES, I_SEQ, I_MDEVTYPE, I_MDEVID, I_MADDR,
       I_MBYTES, I_MTOTALLOC, I_MTOTRES, I_FLOWID, I_CEMPTY, N_ISTORE };
static const char *ISTORE_NAMES[N_ISTORE] = {
    "External id", "correlation", "device", "stream", "registers per thread", "shared memory", "bytes",
    "Sequence number", "Device Type", "Device Id", "Addr", "Bytes", "Total Allocated", "Total Reserved",
    "flow id", "counter without values"};
/* text stores */
enum { T_INDIMS, T_INTYPES, T_CONCRETE, T_INSTRIDES, T_OTHER_ARGS, T_PID, T_TID, N_TSTORE };
static const char *TSTORE_NAMES[N_TSTORE] = {"Input Dims", "Input type", "Concrete Inputs", "Input Strides",
                                             "other args", "pid text", "tid text"};
/* list stores */
enum { L_GRID, L_BLOCK, N_LSTORE };
static const char *LSTORE_NAMES[N_LSTORE] = {"grid", "block"};
/* top-level keys kept as JSON text in other_events.args (after "args" itself), in this order */
#define N_EXTRA 10
static const char *EXTRA_KEYS[N_EXTRA] = {"id", "bp", "s", "scope", "id2", "cname", "tts", "tdur", "sf", "stack"};
#define MAX_DEPTH 512
#define MAX_CAT_CLASSES 64

typedef struct {
    Buf rows; /* int32: position in the route's columns */
    Buf vals; /* int64 */
} IntStore;
#define N_ROUTE 9
typedef struct {
    Buf ph, cat, name, ts, dur, flags, pid, tid; /* int32 x3, int64 x2, uint8, int64 x2 */
    int64_t n;
} RouteCols;
typedef struct {
    Buf rows; /* int32 */
    Buf offs; /* int32, one per row (the start); the end is the next start or data.n */
    Buf data;
} TextStore;
typedef struct {
    Buf rows; /* int32 */
    Buf offs; /* int32 start of each row's values */
    Buf vals; /* int32 */
} ListStore;

/* ------------------------------------------------------------------ interning */
typedef struct {
    uint32_t *slots; /* code + 1; 0 = empty */
    size_t mask, count;
    Buf offs;  /* int32 starts; data.n is the end of the last */
    Buf data;
    Buf cls;   /* uint8 per code: class (ph class, cat class, name flags) */
} Interner;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h;
}

typedef struct Scanner Scanner;
static uint8_t classify(Scanner *s, int which, const char *str, size_t n);

struct Scanner {
    PyObject_HEAD
    int in_span; /* re-scanning a validated value span: its end also ends a number */
    int state;   /* 0: before the first element (']' allowed), 1: after an element, 2: after a comma */
    int oom;
    const char *errmsg;
    Py_ssize_t errpos;
    int64_t nrows;
    int64_t coerced;
    int64_t taken_rows, taken_coerced; /* counted in chunks already handed out by take() */
    Buf route;                  /* uint8 per element, in file order */
    RouteCols rc[N_ROUTE];      /* each route's own columns: they become its table's columns */
    int cur_route;              /* the route of the event being emitted: stores are per route */
    Interner in_ph, in_cat, in_name, in_ckey;
    IntStore istore[N_ROUTE][N_ISTORE];
    TextStore tstore[N_ROUTE][N_TSTORE];
    ListStore lstore[N_ROUTE][N_LSTORE];
    Buf c_rows, c_keys, c_vals; /* counter samples: int32 position in the counters route, key code, value */
    Buf scratch;                /* unescaped strings, minified text */
    int n_cat_classes;
    char *cat_names[MAX_CAT_CLASSES];
    uint8_t cat_classes[MAX_CAT_CLASSES];
};

static void put(Scanner *s, Buf *b, const void *src, size_t k) {
    if (k == 0) return;
    if (buf_reserve(b, k)) {
        s->oom = 1;
        return;
    }
    memcpy(b->p + b->n, src, k);
    b->n += k;
}
static void put_i32(Scanner *s, Buf *b, int32_t v) { put(s, b, &v, 4); }
static void put_i64(Scanner *s, Buf *b, int64_t v) { put(s, b, &v, 8); }
static void put_u8(Scanner *s, Buf *b, uint8_t v) { put(s, b, &v, 1); }

static int intern_grow(Scanner *s, Interner *in) {
    size_t cap = in->mask ? (in->mask + 1) * 2 : 1024;
    uint32_t *slots = (uint32_t *)calloc(cap, sizeof(uint32_t));
    if (!slots) {
        s->oom = 1;
        return -1;
    }
    const int32_t *offs = (const int32_t *)in->offs.p;
    for (size_t c = 0; c < in->count; c++) {
        size_t a = (size_t)offs[c], b = c + 1 < in->count ? (size_t)offs[c + 1] : in->data.n;
        size_t i = hash_bytes(in->data.p + a, b - a) & (cap - 1);
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = (uint32_t)c + 1;
    }
    free(in->slots);
    in->slots = slots;
    in->mask = cap - 1;
    return 0;
}

/* The code of str[0:n] (added if new), or -1 on out-of-memory. which: 0 ph, 1 cat, 2 name, 3 counter key */
static int32_t intern(Scanner *s, Interner *in, int which, const char *str, size_t n) {
    if ((in->count + 1) * 2 > (in->mask ? in->mask + 1 : 0) && intern_grow(s, in)) return -1;
    uint64_t h = hash_bytes(str, n);
    size_t i = h & in->mask;
    const int32_t *offs = (const int32_t *)in->offs.p;
    while (in->slots[i]) {
        size_t c = in->slots[i] - 1;
        size_t a = (size_t)offs[c], b = c + 1 < in->count ? (size_t)offs[c + 1] : in->data.n;
        if (b - a == n && memcmp(in->data.p + a, str, n) == 0) return (int32_t)c;
        i = (i + 1) & in->mask;
    }
    if (in->data.n + n > INT32_MAX) {
        s->oom = 1;
        return -1;
    }
    int32_t code = (int32_t)in->count;
    put_i32(s, &in->offs, (int32_t)in->data.n);
    put(s, &in->data, str, n);
    put_u8(s, &in->cls, classify(s, which, str, n));
    if (s->oom) return -1;
    in->slots[i] = (uint32_t)code + 1;
    in->count++;
    return code;
}

static uint8_t classify(Scanner *s, int which, const char *str, size_t n) {
    if (which == 0) { /* ph */
        if (n != 1) return P_OTHER;
        switch (str[0]) {
        case 'X': return P_X;
        case 'i': case 'I': return P_I;
        case 'C': return P_C;
        case 's': return P_S;
        case 'f': return P_F;
        default: return P_OTHER;
        }
    }
    if (which == 1) { /* cat: lower-case (ASCII) and look up the configured classes */
        for (int k = 0; k < s->n_cat_classes; k++) {
            const char *c = s->cat_names[k];
            if (strlen(c) != n) continue;
            size_t j = 0;
            for (; j < n; j++) {
                char ch = str[j];
                if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
                if (ch != c[j]) break;
            }
            if (j == n) return s->cat_classes[k];
        }
        return C_NONE;
    }
    if (which == 2) return (n == 8 && memcmp(str, "[memory]", 8) == 0) ? 1 : 0;
    return 0;
}

/* ------------------------------------------------------------------ JSON primitives */
/* Return codes of the scanning functions */
#define OK 0
#define NEED (-1)
#define BAD (-2)

static inline const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int utf8_valid(const unsigned char *p, const unsigned char *end) {
    while (p < end) {
        unsigned char c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        int n;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
        else return 0;
        if (end - p <= n) return 0;
        for (int k = 1; k <= n; k++) {
            if ((p[k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[k] & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        p += n + 1;
    }
    return 1;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string starting at *pp (on the opening quote). On OK: *pp after the closing quote, [*a, *b) the
 * raw content, *esc whether it has escapes. Validates escapes, control characters and UTF-8. */
static int scan_string(Scanner *s, const char **pp, const char *end, const char **a, const char **b, int *esc) {
    const char *p = *pp + 1;
    const char *start = p;
    int e = 0, high = 0;
    for (;;) {
        /* Eight bytes at a time while none is '"', '\\' or a control character (SWAR tests; a
         * false positive only hands the word to the byte loop below). Names are long: kernel
         * names of 100-300 bytes are common. */
        while (end - p >= 8) {
            uint64_t x, q, b, t;
            memcpy(&x, p, 8);
            q = x ^ 0x2222222222222222ull;
            b = x ^ 0x5C5C5C5C5C5C5C5Cull;
            t = ((q - 0x0101010101010101ull) & ~q) | ((b - 0x0101010101010101ull) & ~b) |
                ((x - 0x2020202020202020ull) & ~x);
            if (t & 0x8080808080808080ull) break;
            high |= (int)((x & 0x8080808080808080ull) != 0);
            p += 8;
        }
        while (p < end) {
            unsigned char c = (unsigned char)*p;
            if (c == '"' || c == '\\' || c < 0x20) break;
            high |= c & 0x80;
            p++;
        }
        if (p >= end) return NEED;
        if (*p == '"') break;
        if ((unsigned char)*p < 0x20) {
            s->errmsg = "control character in a string";
            *pp = p;
            return BAD;
        }
        /* backslash */
        e = 1;
        if (p + 1 >= end) return NEED;
        char c = p[1];
        if (c == 'u') {
            if (p + 6 > end) return NEED;
            for (int k = 2; k < 6; k++)
                if (hexval(p[k]) < 0) {
                    s->errmsg = "bad \\u escape";
                    *pp = p;
                    return BAD;
                }
            p += 6;
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
            p += 2;
        } else {
            s->errmsg = "bad escape in a string";
            *pp = p;
            return BAD;
        }
    }
    if (high && !utf8_valid((const unsigned char *)start, (const unsigned char *)p)) {
        s->errmsg = "invalid UTF-8 in a string";
        *pp = start;
        return BAD;
    }
    *a = start;
    *b = p;
    *esc = e;
    *pp = p + 1;
    return OK;
}

static void put_utf8(Scanner *s, Buf *out, uint32_t cp) {
    char t[4];
    size_t n;
    if (cp < 0x80) { t[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { t[0] = (char)(0xC0 | (cp >> 6)); t[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12)); t[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); t[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18)); t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); t[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    put(s, out, t, n);
}

/* Unescape a validated string's raw content into out (appended). Lone surrogates become U+FFFD. */
static void unescape(Scanner *s, const char *a, const char *b, Buf *out) {
    while (a < b) {
        const char *q = a;
        while (q < b && *q != '\\') q++;
        put(s, out, a, (size_t)(q - a));
        if (q >= b) break;
        char c = q[1];
        if (c != 'u') {
            char r = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
            put(s, out, &r, 1);
            a = q + 2;
            continue;
        }
        uint32_t cp = (uint32_t)(hexval(q[2]) << 12 | hexval(q[3]) << 8 | hexval(q[4]) << 4 | hexval(q[5]));
        a = q + 6;
        if (cp >= 0xD800 && cp <= 0xDBFF && b - a >= 6 && a[0] == '\\' && a[1] == 'u') {
            uint32_t lo = (uint32_t)(hexval(a[2]) << 12 | hexval(a[3]) << 8 | hexval(a[4]) << 4 | hexval(a[5]));
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                a += 6;
            } else {
                cp = 0xFFFD;
            }
        } else if (cp >= 0xD800 && cp <= 0xDFFF) {
            cp = 0xFFFD;
        }
        put_utf8(s, out, cp);
    }
}

typedef struct {
    const char *a, *b; /* the number's text */
    int is_int;        /* no fraction, no exponent */
} Num;

/* One or more digits at *pp (a fraction's or an exponent's); *pp moves past them. */
static int scan_digits(Scanner *s, const char **pp, const char *end) {
    const char *d = *pp, *p = *pp;
    while (p < end && *p >= '0' && *p <= '9') p++;
    *pp = p;
    if (p >= end && !s->in_span) return NEED;
    if (p == d) {
        s->errmsg = "invalid number";
        return BAD;
    }
    return OK;
}

/* A number at *pp (JSON grammar). At the buffer's end the number may go on: NEED. */
static int scan_number(Scanner *s, const char **pp, const char *end, Num *num) {
    const char *p = *pp;
    num->a = p;
    num->is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return NEED;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        s->errmsg = "invalid number";
        return BAD;
    }
    if (p < end && *p == '.') {
        num->is_int = 0;
        p++;
        int rc = scan_digits(s, &p, end);
        if (rc != OK) return rc;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        num->is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        int rc = scan_digits(s, &p, end);
        if (rc != OK) return rc;
    }
    if (p >= end && !s->in_span) return NEED;
    num->b = p;
    *pp = p;
    return OK;
}

/* Exact value * 10^scale of a number's text as int64, rounded half away from zero.
 * Returns 0 ok, 1 out of int64 range, 2 not a number. */
static int text_scaled_i64(const char *a, const char *b, int scale, int64_t *out) {
    const char *p = a;
    int neg = 0;
    if (p < b && *p == '-') { neg = 1; p++; }
    else if (p < b && *p == '+') p++;
    __int128 mant = 0;
    int ndig = 0, exp10 = 0, any = 0, dropped_first = -1, seen_dot = 0;
    for (; p < b; p++) {
        char c = *p;
        if (c >= '0' && c <= '9') {
            any = 1;
            if (ndig < 36) {
                if (mant || c != '0') ndig++;
                mant = mant * 10 + (c - '0');
                if (seen_dot) exp10--;
            } else {
                if (dropped_first < 0) dropped_first = c - '0';
                if (!seen_dot) exp10++;
            }
        } else if (c == '.' && !seen_dot) {
            seen_dot = 1;
        } else {
            break;
        }
    }
    if (!any) return 2;
    if (p < b) {
        if (*p != 'e' && *p != 'E') return 2;
        p++;
        int eneg = 0;
        if (p < b && (*p == '+' || *p == '-')) { eneg = *p == '-'; p++; }
        if (p >= b) return 2;
        long e = 0;
        for (; p < b; p++) {
            if (*p < '0' || *p > '9') return 2;
            if (e < 100000) e = e * 10 + (*p - '0');
        }
        exp10 += (int)(eneg ? -e : e);
    }
    int k = exp10 + scale;
    if (mant == 0) { *out = 0; return 0; }
    if (k >= 0) {
        if (k > 19 + 18) return 1;
        for (int i = 0; i < k; i++) {
            mant *= 10;
            if (mant > (__int128)INT64_MAX + 1) return 1;
        }
    } else {
        int drop = -k;
        if (drop > 38) { *out = 0; return 0; }
        __int128 pow = 1;
        for (int i = 0; i < drop - 1; i++) pow *= 10;
        __int128 q = mant / pow; /* keeps one digit beyond the result */
        int first = (int)(q % 10);
        mant = q / 10;
        if (first >= 5) mant += 1;
        (void)dropped_first;
    }
    if (dropped_first >= 0 && k >= 0) {
        /* digits beyond 36 significant ones before the point: the value is already out of range */
        return 1;
    }
    if (neg) mant = -mant;
    if (mant > INT64_MAX || mant < INT64_MIN) return 1;
    *out = (int64_t)mant;
    return 0;
}

static int text_double(const char *a, const char *b, double *out) {
    char tmp[128];
    size_t n = (size_t)(b - a);
    if (n == 0 || n >= sizeof tmp) return 2;
    memcpy(tmp, a, n);
    tmp[n] = 0;
    char *e;
    *out = strtod(tmp, &e);
    return *e == 0 ? 0 : 2;
}

/* An object member's key and its ':' at *pp (whitespace allowed before each). On OK, *pp is past the
 * ':' and [*ka, *kb) is the key's raw text; with ``out`` the key and ':' are appended to it. */
static int scan_key(Scanner *s, const char **pp, const char *end, const char **ka, const char **kb, int *esc, Buf *out) {
    const char *p = skip_ws(*pp, end);
    if (p >= end) return NEED;
    if (*p != '"') {
        s->errmsg = "expected a key";
        *pp = p;
        return BAD;
    }
    const char *q = p;
    int r = scan_string(s, &q, end, ka, kb, esc);
    if (r != OK) {
        *pp = q;
        return r;
    }
    if (out) put(s, out, p, (size_t)(q - p));
    q = skip_ws(q, end);
    if (q >= end) return NEED;
    if (*q != ':') {
        s->errmsg = "expected ':'";
        *pp = q;
        return BAD;
    }
    if (out) put(s, out, ":", 1);
    *pp = q + 1;
    return OK;
}

/* Any JSON value at *pp; appended minified to out when out != NULL. */
static int scan_value(Scanner *s, const char **pp, const char *end, Buf *out, int depth) {
    const char *p = skip_ws(*pp, end);
    if (p >= end) return NEED;
    char c = *p;
    int r;
    if (c == '"') {
        const char *a, *b;
        int esc;
        const char *q = p;
        r = scan_string(s, &q, end, &a, &b, &esc);
        if (r != OK) {
            *pp = q;
            return r;
        }
        if (out) put(s, out, p, (size_t)(q - p));
        *pp = q;
        return OK;
    }
    if (c == '{' || c == '[') {
        if (depth >= MAX_DEPTH) {
            s->errmsg = "nesting too deep";
            *pp = p;
            return BAD;
        }
        char close = c == '{' ? '}' : ']';
        if (out) put(s, out, p, 1);
        p = skip_ws(p + 1, end);
        if (p >= end) return NEED;
        if (*p == close) {
            if (out) put(s, out, p, 1);
            *pp = p + 1;
            return OK;
        }
        for (;;) {
            if (c == '{') {
                const char *ka, *kb;
                int esc;
                r = scan_key(s, &p, end, &ka, &kb, &esc, out);
                if (r != OK) {
                    *pp = p;
                    return r;
                }
            }
            r = scan_value(s, &p, end, out, depth + 1);
            if (r != OK) {
                *pp = p;
                return r;
            }
            p = skip_ws(p, end);
            if (p >= end) return NEED;
            if (*p == ',') {
                if (out) put(s, out, ",", 1);
                p++;
                continue;
            }
            if (*p == close) {
                if (out) put(s, out, p, 1);
                *pp = p + 1;
                return OK;
            }
            s->errmsg = c == '{' ? "expected ',' or '}'" : "expected ',' or ']'";
            *pp = p;
            return BAD;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        Num num;
        const char *q = p;
        r = scan_number(s, &q, end, &num);
        if (r != OK) {
            *pp = q;
            return r;
        }
        if (out) put(s, out, p, (size_t)(q - p));
        *pp = q;
        return OK;
    }
    const char *lit = c == 't' ? "true" : c == 'f' ? "false" : c == 'n' ? "null" : NULL;
    if (!lit) {
        s->errmsg = "unexpected character";
        *pp = p;
        return BAD;
    }
    size_t n = strlen(lit);
    size_t have = (size_t)(end - p) < n ? (size_t)(end - p) : n;
    if (memcmp(p, lit, have) != 0) {
        s->errmsg = "invalid literal";
        *pp = p;
        return BAD;
    }
    if (have < n) return NEED;
    if (out) put(s, out, p, n);
    *pp = p + n;
    return OK;
}

/* ------------------------------------------------------------------ one event */
typedef struct {
    const char *a, *b; /* value span (raw text), a == NULL: absent */
} Span;

typedef struct {
    int32_t ph, cat, name;
    Span ts, dur, pid, tid, args, extra[N_EXTRA];
    int coerced;
} Ev;

/* Intern a value (string: unescaped content; other: minified JSON text; null: -1). */
static int32_t intern_value(Scanner *s, Interner *in, int which, Span v, int *coerced) {
    if (!v.a || (*v.a == 'n' && v.b - v.a == 4)) return -1;
    s->scratch.n = 0;
    if (*v.a == '"') {
        const char *a = v.a + 1, *b = v.b - 1;
        if (memchr(a, '\\', (size_t)(b - a)) == NULL) return intern(s, in, which, a, (size_t)(b - a));
        unescape(s, a, b, &s->scratch);
    } else {
        const char *p = v.a;
        scan_value(s, &p, v.b, &s->scratch, 0);
        (void)coerced;
    }
    if (s->oom) return -1;
    return intern(s, in, which, s->scratch.p, s->scratch.n);
}

/* A number or numeric string as int64 ns / int64. state: 0 null/absent, 1 ok, 2 overflow, 3 bad type */
static int value_scaled(Span v, int scale, int64_t *out, int *coerced) {
    if (!v.a) return 0;
    char c = *v.a;
    if (c == 'n') return 0;
    if (c == '-' || (c >= '0' && c <= '9')) {
        int r = text_scaled_i64(v.a, v.b, scale, out);
        return r == 0 ? 1 : r == 1 ? 2 : 3;
    }
    *coerced = 1;
    if (c == '"' && memchr(v.a + 1, '\\', (size_t)(v.b - v.a - 2)) == NULL) {
        int r = text_scaled_i64(v.a + 1, v.b - 1, scale, out);
        return r == 0 ? 1 : r == 1 ? 2 : 3;
    }
    return 3;
}

/* An arg value as int64 (integers exact, other numbers rounded, integer strings parsed); 1 if set. */
static int value_i64(Span v, int64_t *out) {
    int dummy = 0;
    return value_scaled(v, 0, out, &dummy) == 1;
}

static void store_int(Scanner *s, int k, int64_t row, int64_t v) {
    put_i32(s, &s->istore[s->cur_route][k].rows, (int32_t)row);
    put_i64(s, &s->istore[s->cur_route][k].vals, v);
}

static void store_text_begin(Scanner *s, int k, int64_t row) {
    TextStore *t = &s->tstore[s->cur_route][k];
    put_i32(s, &t->rows, (int32_t)row);
    put_i32(s, &t->offs, (int32_t)t->data.n);
}

static void store_minified_into(Scanner *s, Buf *out, Span v);

static void store_minified(Scanner *s, int k, int64_t row, Span v) {
    store_text_begin(s, k, row);
    store_minified_into(s, &s->tstore[s->cur_route][k].data, v);
}

/* The text of a pid/tid for other_events: a string's content, else the JSON text. */
static void store_id_text(Scanner *s, int k, int64_t row, Span v) {
    if (!v.a) return;
    store_text_begin(s, k, row);
    if (*v.a == '"')
        unescape(s, v.a + 1, v.b - 1, &s->tstore[s->cur_route][k].data);
    else
        store_minified_into(s, &s->tstore[s->cur_route][k].data, v);
}

static int key_is(const char *a, const char *b, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(b - a) == n && memcmp(a, lit, n) == 0;
}

/* The end of a value that was validated already (a second pass over an event): only strings and
 * brackets matter, so this is much cheaper than scan_value. */
static const char *skip_valid(const char *p, const char *end) {
    char c = *p;
    if (c == '"') {
        const char *start = ++p;
        for (;;) {
            const char *q = (const char *)memchr(p, '"', (size_t)(end - p));
            if (!q) return end;
            const char *r = q;
            while (r > start && r[-1] == '\\') r--;
            if ((q - r) % 2 == 0) return q + 1; /* not escaped: an even run of backslashes before it */
            p = q + 1;
        }
    }
    if (c == '{' || c == '[') {
        int depth = 0;
        for (; p < end; p++) {
            c = *p;
            if (c == '"') {
                p = skip_valid(p, end) - 1;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if ((c == '}' || c == ']') && --depth == 0) {
                return p + 1;
            }
        }
        return end;
    }
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') p++;
    return p;
}

/* Iterate the members of an object span: callback gets the (unescaped) key and the value span. */
typedef void (*member_fn)(Scanner *s, int64_t row, const char *ka, const char *kb, Span v, void *ctx);

static void each_member(Scanner *s, Span obj, int64_t row, member_fn fn, void *ctx) {
    const char *p = obj.a, *end = obj.b;
    if (!p || *p != '{') return;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return;
    Buf keybuf = {0};
    while (p < end) {
        p = skip_ws(p, end);
        const char *ka, *kb;
        int esc;
        if (scan_string(s, &p, end, &ka, &kb, &esc) != OK) break;
        if (esc) {
            keybuf.n = 0;
            unescape(s, ka, kb, &keybuf);
            ka = keybuf.p;
            kb = keybuf.p + keybuf.n;
        }
        p = skip_ws(p, end);
        p++; /* ':' */
        p = skip_ws(p, end);
        Span v = {p, NULL};
        p = skip_valid(p, end);
        v.b = p;
        fn(s, row, ka, kb, v, ctx);
        p = skip_ws(p, end);
        if (p >= end || *p != ',') break;
        p++;
    }
    buf_free(&keybuf);
}

static void list_member(Scanner *s, int k, int64_t row, Span v) {
    /* [int, int, ...]: non-integers make the whole value null */
    const char *p = skip_ws(v.a, v.b);
    if (p >= v.b || *p != '[') return;
    int32_t tmp[16];
    int n = 0;
    p = skip_ws(p + 1, v.b);
    if (*p != ']') {
        for (;;) {
            p = skip_ws(p, v.b);
            Span e = {p, NULL};
            if (scan_value(s, &p, v.b, NULL, 0) != OK) return;
            e.b = p;
            int64_t x;
            if (!value_i64(e, &x) || x < INT32_MIN || x > INT32_MAX || n >= 16) return;
            tmp[n++] = (int32_t)x;
            p = skip_ws(p, v.b);
            if (*p == ',') {
                p++;
                continue;
            }
            break;
        }
    }
    ListStore *l = &s->lstore[s->cur_route][k];
    put_i32(s, &l->rows, (int32_t)row);
    put_i32(s, &l->offs, (int32_t)(l->vals.n / 4));
    put(s, &l->vals, tmp, (size_t)n * 4);
}

/* Whether a JSON value holds the number 0 (a token "0": JSON numbers have no leading zeros). */
static int has_zero_number(Span v) {
    for (const char *p = v.a; p && p < v.b; p++) {
        if (*p != '0') continue;
        char before = p > v.a ? p[-1] : '[', after = p + 1 < v.b ? p[1] : ']';
        if (strchr("[, \t\r\n", before) && strchr("], \t\r\n", after)) return 1;
    }
    return 0;
}

static void timed_arg(Scanner *s, int64_t row, const char *ka, const char *kb, Span v, void *ctx) {
    int route = *(int *)ctx;
    int64_t x;
    size_t n = (size_t)(kb - ka);
    int k = -1;
    switch (n) {
    case 4: if (key_is(ka, kb, "grid")) { list_member(s, L_GRID, row, v); return; } break;
    case 5:
        if (key_is(ka, kb, "block")) { list_member(s, L_BLOCK, row, v); return; }
        if (key_is(ka, kb, "bytes")) k = I_BYTES;
        break;
    case 6: if (key_is(ka, kb, "device")) k = I_DEVICE; else if (key_is(ka, kb, "stream")) k = I_STREAM; break;
    case 10: if (key_is(ka, kb, "Input Dims") && route == R_CPU) { store_minified(s, T_INDIMS, row, v); return; }
             if (key_is(ka, kb, "Input type") && route == R_CPU) { store_minified(s, T_INTYPES, row, v); return; }
             break;
    case 11: if (key_is(ka, kb, "External id")) k = I_EXT; else if (key_is(ka, kb, "correlation")) k = I_CORR; break;
    case 13: if (key_is(ka, kb, "shared memory")) k = I_SHMEM;
             else if (key_is(ka, kb, "Input Strides") && route == R_CPU) {
                 /* kept only where some input is an expanded view (a 0 stride): a dense input's dims say it all */
                 if (has_zero_number(v)) store_minified(s, T_INSTRIDES, row, v);
                 return;
             }
             break;
    case 15: if (key_is(ka, kb, "Sequence number")) k = I_SEQ;
             else if (key_is(ka, kb, "Concrete Inputs") && route == R_CPU) {
                 /* kept only where some input has a value: most ops' list is all "" (tensors) */
                 for (const char *p = v.a; p < v.b; p++)
                     if (!strchr("[]\", \t\r\n", *p)) { store_minified(s, T_CONCRETE, row, v); break; }
                 return;
             }
             break;
    case 20: if (key_is(ka, kb, "registers per thread")) k = I_REGS; break;
    default: break;
    }
    if (k >= 0 && value_i64(v, &x)) store_int(s, k, row, x);
}

static void memory_arg(Scanner *s, int64_t row, const char *ka, const char *kb, Span v, void *ctx) {
    (void)ctx;
    static const int keys[6] = {I_MDEVTYPE, I_MDEVID, I_MADDR, I_MBYTES, I_MTOTALLOC, I_MTOTRES};
    for (int j = 0; j < 6; j++) {
        if (key_is(ka, kb, ISTORE_NAMES[keys[j]])) {
            int64_t x;
            if (value_i64(v, &x)) store_int(s, keys[j], row, x);
            return;
        }
    }
}

static void counter_arg(Scanner *s, int64_t row, const char *ka, const char *kb, Span v, void *ctx) {
    int *n_members = (int *)ctx;
    (*n_members)++;
    char c = *v.a;
    if (!(c == '-' || (c >= '0' && c <= '9'))) return; /* only numbers are samples (not bools, strings) */
    double x;
    if (text_double(v.a, v.b, &x) != 0) return;
    int32_t code = intern(s, &s->in_ckey, 3, ka, (size_t)(kb - ka));
    if (code < 0) return;
    put_i32(s, &s->c_rows, (int32_t)row);
    put_i32(s, &s->c_keys, code);
    put(s, &s->c_vals, &x, 8);
}

/* A validated value's text without the whitespace between tokens, in one pass (no re-parse): the
 * span was checked when the event was scanned, so every escape has its character. */
static void store_minified_into(Scanner *s, Buf *out, Span v) {
    if (buf_reserve(out, (size_t)(v.b - v.a))) {
        s->oom = 1;
        return;
    }
    char *o = out->p + out->n;
    int in_str = 0;
    for (const char *p = v.a; p < v.b; p++) {
        char c = *p;
        if (in_str) {
            *o++ = c;
            if (c == '\\')
                *o++ = *++p;
            else if (c == '"')
                in_str = 0;
        } else if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
            *o++ = c;
            in_str = c == '"';
        }
    }
    out->n = (size_t)(o - out->p);
}

/* The event has been parsed and validated: route it and write its columns and stores. */
static void emit_event(Scanner *s, Ev *ev) {
    int64_t row; /* position in the route's columns (set once the route is known) */
    uint8_t flags = 0;
    int64_t ts = 0, dur = 0, pid = 0, tid = 0;
    int coerced = ev->coerced;
    int ts_state = value_scaled(ev->ts, 3, &ts, &coerced);
    int dur_state = value_scaled(ev->dur, 3, &dur, &coerced);
    if (ts_state == 1) flags |= F_TS_OK;
    if (ts_state == 2) flags |= F_TS_OVF;
    if (dur_state == 1) flags |= F_DUR_OK;
    if (dur_state == 2) flags |= F_DUR_OVF;
    if (value_i64(ev->pid, &pid)) flags |= F_PID_OK;
    if (value_i64(ev->tid, &tid)) flags |= F_TID_OK;
    if (ts_state != 1) ts = 0;
    if (dur_state != 1) dur = 0;
    if (coerced) {
        flags |= F_COERCED;
        s->coerced++;
    }
    uint8_t phc = ev->ph >= 0 ? (uint8_t)s->in_ph.cls.p[ev->ph] : P_OTHER;
    uint8_t catc = ev->cat >= 0 ? (uint8_t)s->in_cat.cls.p[ev->cat] : C_NONE;
    int is_mem = ev->name >= 0 && s->in_name.cls.p[ev->name];
    int route = R_OTHER;
    if (phc == P_X && catc >= C_GPU && catc <= C_ANNOT) route = R_GPU + (catc - C_GPU);
    else if (phc == P_I && is_mem) route = R_MEMORY;
    else if (phc == P_C) route = R_COUNTERS;
    /* a timeline event without a usable ts is skipped (counted); an overflowing one is kept (ts null) */
    if (route != R_OTHER && (ts_state == 0 || ts_state == 3)) route = R_SKIP_NOTS;
    s->cur_route = route;
    RouteCols *rc = &s->rc[route];
    row = rc->n;

    if (route >= R_GPU && route <= R_ANNOT) {
        each_member(s, ev->args, row, timed_arg, &route);
    } else if (route == R_MEMORY) {
        each_member(s, ev->args, row, memory_arg, NULL);
    } else if (route == R_COUNTERS) {
        int n_members = 0;
        each_member(s, ev->args, row, counter_arg, &n_members);
        if (n_members == 0) store_int(s, I_CEMPTY, row, 0);
    } else if (route == R_OTHER) {
        store_id_text(s, T_PID, row, ev->pid);
        store_id_text(s, T_TID, row, ev->tid);
        int any = ev->args.a != NULL;
        for (int j = 0; j < N_EXTRA; j++) any |= ev->extra[j].a != NULL;
        if (any) {
            store_text_begin(s, T_OTHER_ARGS, row);
            Buf *o = &s->tstore[R_OTHER][T_OTHER_ARGS].data;
            int first = 1;
            put(s, o, "{", 1);
            if (ev->args.a) {
                put(s, o, "\"args\":", 7);
                store_minified_into(s, o, ev->args);
                first = 0;
            }
            for (int j = 0; j < N_EXTRA; j++) {
                if (!ev->extra[j].a) continue;
                if (!first) put(s, o, ",", 1);
                first = 0;
                put(s, o, "\"", 1);
                put(s, o, EXTRA_KEYS[j], strlen(EXTRA_KEYS[j]));
                put(s, o, "\":", 2);
                store_minified_into(s, o, ev->extra[j]);
            }
            put(s, o, "}", 1);
        }
        int64_t fid;
        if (catc == C_AC2G && (phc == P_S || phc == P_F) && value_i64(ev->extra[0], &fid))
            store_int(s, I_FLOWID, row, fid);
    }
    put_u8(s, &s->route, (uint8_t)route);
    put_i32(s, &rc->ph, ev->ph);
    put_i32(s, &rc->cat, ev->cat);
    put_i32(s, &rc->name, ev->name);
    put_i64(s, &rc->ts, ts);
    put_i64(s, &rc->dur, dur);
    put_u8(s, &rc->flags, flags);
    put_i64(s, &rc->pid, pid);
    put_i64(s, &rc->tid, tid);
    rc->n++;
    s->nrows++;
}

/* An event object at *pp ('{'). Validates the whole object; then emits it. */
static int scan_event(Scanner *s, const char **pp, const char *end) {
    Ev ev;
    memset(&ev, 0, sizeof ev);
    ev.ph = ev.cat = ev.name = -1;
    Span phs = {0}, cats = {0}, names = {0};
    const char *p = skip_ws(*pp + 1, end);
    if (p >= end) return NEED;
    if (*p != '}') {
        for (;;) {
            const char *ka, *kb;
            int esc;
            int r = scan_key(s, &p, end, &ka, &kb, &esc, NULL);
            if (r != OK) {
                *pp = p;
                return r;
            }
            p = skip_ws(p, end);
            if (p >= end) return NEED;
            Span v = {p, NULL};
            r = scan_value(s, &p, end, NULL, 0);
            if (r != OK) {
                *pp = p;
                return r;
            }
            v.b = p;
            if (!esc) {
                size_t n = (size_t)(kb - ka);
                if (n == 2 && ka[0] == 'p' && ka[1] == 'h') phs = v;
                else if (n == 2 && ka[0] == 't' && ka[1] == 's') ev.ts = v;
                else if (n == 3 && memcmp(ka, "cat", 3) == 0) cats = v;
                else if (n == 3 && memcmp(ka, "dur", 3) == 0) ev.dur = v;
                else if (n == 3 && memcmp(ka, "pid", 3) == 0) ev.pid = v;
                else if (n == 3 && memcmp(ka, "tid", 3) == 0) ev.tid = v;
                else if (n == 4 && memcmp(ka, "name", 4) == 0) names = v;
                else if (n == 4 && memcmp(ka, "args", 4) == 0) ev.args = v;
                else {
                    for (int j = 0; j < N_EXTRA; j++)
                        if (key_is(ka, kb, EXTRA_KEYS[j])) {
                            ev.extra[j] = v;
                            break;
                        }
                }
            }
            p = skip_ws(p, end);
            if (p >= end) return NEED;
            if (*p == ',') {
                p++;
                continue;
            }
            if (*p == '}') break;
            s->errmsg = "expected ',' or '}'";
            *pp = p;
            return BAD;
        }
    }
    p++; /* '}' */
    s->in_span = 1;
    ev.ph = intern_value(s, &s->in_ph, 0, phs, &ev.coerced);
    ev.cat = intern_value(s, &s->in_cat, 1, cats, &ev.coerced);
    ev.name = intern_value(s, &s->in_name, 2, names, &ev.coerced);
    emit_event(s, &ev);
    s->in_span = 0;
    *pp = p;
    return OK;
}

/* A non-object element: validated, counted as a row that is skipped. */
static void emit_skip(Scanner *s) {
    RouteCols *rc = &s->rc[R_SKIP_NOTOBJ];
    put_u8(s, &s->route, R_SKIP_NOTOBJ);
    put_i32(s, &rc->ph, -1);
    put_i32(s, &rc->cat, -1);
    put_i32(s, &rc->name, -1);
    put_i64(s, &rc->ts, 0);
    put_i64(s, &rc->dur, 0);
    put_u8(s, &rc->flags, 0);
    put_i64(s, &rc->pid, 0);
    put_i64(s, &rc->tid, 0);
    rc->n++;
    s->nrows++;
}

static int scan_elements(Scanner *s, const char *buf, const char *end, Py_ssize_t *consumed) {
    const char *p = buf;
    for (;;) {
        p = skip_ws(p, end);
        *consumed = p - buf;
        if (p >= end) return ST_NEED;
        if (s->state == 1) { /* after an element */
            if (*p == ',') {
                s->state = 2;
                p++;
                continue;
            }
            if (*p == ']') {
                *consumed = p + 1 - buf;
                return ST_END;
            }
            s->errmsg = "expected ',' or ']' between events";
            s->errpos = p - buf;
            return ST_ERROR;
        }
        if (*p == ']' && s->state == 0) {
            *consumed = p + 1 - buf;
            return ST_END;
        }
        if (s->nrows >= INT32_MAX - 1) {
            s->errmsg = "more than 2^31 events in one file";
            s->errpos = p - buf;
            return ST_ERROR;
        }
        const char *q = p;
        int r;
        if (*p == '{') {
            r = scan_event(s, &q, end);
        } else {
            r = scan_value(s, &q, end, NULL, 0);
            if (r == OK) emit_skip(s);
        }
        if (r == NEED) return ST_NEED; /* consumed: this element's start */
        if (r == BAD) {
            s->errpos = q - buf;
            return ST_ERROR;
        }
        if (s->oom) return ST_ERROR;
        s->state = 1;
        p = q;
    }
}

/* ------------------------------------------------------------------ Python type */
static void interner_free(Interner *in) {
    free(in->slots);
    in->slots = NULL;
    in->mask = in->count = 0;
    buf_free(&in->offs);
    buf_free(&in->data);
    buf_free(&in->cls);
}

static void scanner_clear(Scanner *s) {
    Buf *cols[] = {&s->route, &s->c_rows, &s->c_keys, &s->c_vals, &s->scratch};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) buf_free(cols[i]);
    for (int r = 0; r < N_ROUTE; r++) {
        RouteCols *rc = &s->rc[r];
        Buf *rb[] = {&rc->ph, &rc->cat, &rc->name, &rc->ts, &rc->dur, &rc->flags, &rc->pid, &rc->tid};
        for (size_t i = 0; i < sizeof rb / sizeof rb[0]; i++) buf_free(rb[i]);
        rc->n = 0;
    }
    interner_free(&s->in_ph);
    interner_free(&s->in_cat);
    interner_free(&s->in_name);
    interner_free(&s->in_ckey);
    for (int r = 0; r < N_ROUTE; r++) {
        for (int k = 0; k < N_ISTORE; k++) { buf_free(&s->istore[r][k].rows); buf_free(&s->istore[r][k].vals); }
        for (int k = 0; k < N_TSTORE; k++) {
            buf_free(&s->tstore[r][k].rows); buf_free(&s->tstore[r][k].offs); buf_free(&s->tstore[r][k].data);
        }
        for (int k = 0; k < N_LSTORE; k++) {
            buf_free(&s->lstore[r][k].rows); buf_free(&s->lstore[r][k].offs); buf_free(&s->lstore[r][k].vals);
        }
    }
}

static void Scanner_dealloc(Scanner *s) {
    scanner_clear(s);
    for (int k = 0; k < s->n_cat_classes; k++) free(s->cat_names[k]);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int Scanner_init(Scanner *s, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"cat_classes", NULL};
    PyObject *classes;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!", kwlist, &PyDict_Type, &classes)) return -1;
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(classes, &pos, &key, &val)) {
        if (s->n_cat_classes >= MAX_CAT_CLASSES) {
            PyErr_SetString(PyExc_ValueError, "too many categories");
            return -1;
        }
        const char *k = PyUnicode_AsUTF8(key);
        long c = PyLong_AsLong(val);
        if (!k || (c == -1 && PyErr_Occurred())) return -1;
        s->cat_names[s->n_cat_classes] = strdup(k);
        s->cat_classes[s->n_cat_classes] = (uint8_t)c;
        s->n_cat_classes++;
    }
    return 0;
}

static PyObject *Scanner_feed(Scanner *s, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    Py_ssize_t consumed = 0;
    int status;
    s->errmsg = NULL;
    Py_BEGIN_ALLOW_THREADS
    status = scan_elements(s, (const char *)view.buf, (const char *)view.buf + view.len, &consumed);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (s->oom) return PyErr_NoMemory();
    return Py_BuildValue("(ni)", consumed, status);
}

/* A column handed to Python without a copy: owns the buffer, exposes it read-only. */
typedef struct {
    PyObject_HEAD
    Buf buf;
} Column;

static int Column_getbuffer(Column *c, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)c, c->buf.p ? c->buf.p : (char *)"", (Py_ssize_t)c->buf.n, 1, flags);
}
static void Column_dealloc(Column *c) {
    buf_free(&c->buf);
    Py_TYPE(c)->tp_free((PyObject *)c);
}
static PyBufferProcs Column_as_buffer = {(getbufferproc)Column_getbuffer, NULL};
static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit.ingest._kscan.Column",
    .tp_basicsize = sizeof(Column),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A scanned column (read-only buffer)",
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_buffer = &Column_as_buffer,
};

static PyObject *take_buf(Buf *b) {
    Column *c = PyObject_New(Column, &ColumnType);
    if (!c) return NULL;
    c->buf = *b; /* ownership moves to the column */
    memset(b, 0, sizeof *b);
    return (PyObject *)c;
}

static int set_item(PyObject *d, const char *k, PyObject *v) {
    if (!v) return -1;
    int r = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return r;
}

/* Arrow offsets hold n + 1 entries: append the end. -1 (MemoryError set) when out of memory. */
static int close_offsets(Scanner *s, Buf *offs, size_t end) {
    put_i32(s, offs, (int32_t)end);
    if (s->oom) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* A route's store buffer, moved to d["r<route>.<kind>.<name>.<part>"]. */
static int export_buf(PyObject *d, int r, const char *kind, const char *name, const char *part, Buf *b) {
    char k[96];
    snprintf(k, sizeof k, "r%d.%s.%s.%s", r, kind, name, part);
    return set_item(d, k, take_buf(b));
}

/* A copy of a buffer as a Column (the interner keeps its own: take() goes on scanning). */
static PyObject *copy_buf(Scanner *s, const Buf *b, const void *tail, size_t tail_n) {
    Buf c = {0};
    put(s, &c, b->p, b->n);
    put(s, &c, tail, tail_n);
    if (s->oom) {
        buf_free(&c);
        return PyErr_NoMemory();
    }
    return take_buf(&c);
}

/* An interner's dictionary (offsets with their end, data) as copies: codes stay valid across chunks. */
static int copy_interner(Scanner *s, PyObject *d, const char *name, Interner *in) {
    char k[64];
    int32_t end = (int32_t)in->data.n;
    snprintf(k, sizeof k, "%s.offsets", name);
    if (set_item(d, k, copy_buf(s, &in->offs, &end, 4))) return -1;
    snprintf(k, sizeof k, "%s.data", name);
    return set_item(d, k, copy_buf(s, &in->data, NULL, 0));
}

static int put_interner(Scanner *s, PyObject *d, const char *name, Interner *in) {
    char k[64];
    if (close_offsets(s, &in->offs, in->data.n)) return -1;
    snprintf(k, sizeof k, "%s.offsets", name);
    if (set_item(d, k, take_buf(&in->offs))) return -1;
    snprintf(k, sizeof k, "%s.data", name);
    if (set_item(d, k, take_buf(&in->data))) return -1;
    free(in->slots);
    in->slots = NULL;
    in->mask = in->count = 0;
    buf_free(&in->cls);
    return 0;
}

/* Hand every column and store of the elements since the last take() to Python, without copying (each
 * becomes a Column). keep: the dictionaries are copied and the parse state kept (take), else moved out
 * and the scanner cleared (result). */
static PyObject *export_columns(Scanner *s, int keep) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    char k[96];
    if (set_item(d, "rows", PyLong_FromLongLong(s->nrows - s->taken_rows))) goto fail;
    if (set_item(d, "coerced", PyLong_FromLongLong(s->coerced - s->taken_coerced))) goto fail;
    if (set_item(d, "route", take_buf(&s->route))) goto fail;
    Buf *cb[] = {&s->c_rows, &s->c_keys, &s->c_vals};
    const char *cn[] = {"counter.rows", "counter.keys", "counter.values"};
    for (int i = 0; i < 3; i++)
        if (set_item(d, cn[i], take_buf(cb[i]))) goto fail;
    for (int r = 0; r < N_ROUTE; r++) {
        RouteCols *rc = &s->rc[r];
        snprintf(k, sizeof k, "r%d.n", r);
        if (set_item(d, k, PyLong_FromLongLong(rc->n))) goto fail;
        Buf *rb[] = {&rc->ph, &rc->cat, &rc->name, &rc->ts, &rc->dur, &rc->flags, &rc->pid, &rc->tid};
        const char *rn[] = {"ph", "cat", "name", "ts", "dur", "flags", "pid", "tid"};
        for (int i = 0; i < 8; i++) {
            snprintf(k, sizeof k, "r%d.%s", r, rn[i]);
            if (set_item(d, k, take_buf(rb[i]))) goto fail;
        }
        /* the stores this route has (absent keys: no entry) */
        for (int j = 0; j < N_ISTORE; j++) {
            IntStore *st = &s->istore[r][j];
            if (st->rows.n && (export_buf(d, r, "i", ISTORE_NAMES[j], "rows", &st->rows) ||
                               export_buf(d, r, "i", ISTORE_NAMES[j], "values", &st->vals)))
                goto fail;
        }
        for (int j = 0; j < N_TSTORE; j++) {
            TextStore *t = &s->tstore[r][j];
            if (t->rows.n && (close_offsets(s, &t->offs, t->data.n) ||
                              export_buf(d, r, "t", TSTORE_NAMES[j], "rows", &t->rows) ||
                              export_buf(d, r, "t", TSTORE_NAMES[j], "offsets", &t->offs) ||
                              export_buf(d, r, "t", TSTORE_NAMES[j], "data", &t->data)))
                goto fail;
        }
        for (int j = 0; j < N_LSTORE; j++) {
            ListStore *l = &s->lstore[r][j];
            if (l->rows.n && (close_offsets(s, &l->offs, l->vals.n / 4) ||
                              export_buf(d, r, "l", LSTORE_NAMES[j], "rows", &l->rows) ||
                              export_buf(d, r, "l", LSTORE_NAMES[j], "offsets", &l->offs) ||
                              export_buf(d, r, "l", LSTORE_NAMES[j], "values", &l->vals)))
                goto fail;
        }
    }
    if (keep) {
        if (copy_interner(s, d, "ph", &s->in_ph) || copy_interner(s, d, "cat", &s->in_cat) ||
            copy_interner(s, d, "name", &s->in_name) || copy_interner(s, d, "counter.key", &s->in_ckey))
            goto fail;
        for (int r = 0; r < N_ROUTE; r++) s->rc[r].n = 0; /* the next chunk's rows start at 0 */
        s->taken_rows = s->nrows;
        s->taken_coerced = s->coerced;
        return d;
    }
    if (put_interner(s, d, "ph", &s->in_ph) || put_interner(s, d, "cat", &s->in_cat) ||
        put_interner(s, d, "name", &s->in_name) || put_interner(s, d, "counter.key", &s->in_ckey))
        goto fail;
    scanner_clear(s);
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *Scanner_result(Scanner *s, PyObject *noargs) {
    (void)noargs;
    return export_columns(s, 0);
}

static PyObject *Scanner_take(Scanner *s, PyObject *noargs) {
    (void)noargs;
    return export_columns(s, 1);
}

static PyObject *Scanner_get_error(Scanner *s, void *closure) {
    (void)closure;
    if (!s->errmsg) Py_RETURN_NONE;
    return Py_BuildValue("(sn)", s->errmsg, s->errpos);
}

static PyObject *Scanner_get_rows(Scanner *s, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(s->nrows);
}

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_VARARGS,
     "feed(buffer) -> (consumed, status): scan whole elements; status 0 need more, 1 array end, 2 error"},
    {"result", (PyCFunction)Scanner_result, METH_NOARGS, "result() -> dict of read-only buffers (columns, stores, dictionaries), moved out of the scanner"},
    {"take", (PyCFunction)Scanner_take, METH_NOARGS, "take() -> result() of the elements since the last take(); the scanner goes on (dictionary codes stay valid)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Scanner_getset[] = {
    {"error", (getter)Scanner_get_error, NULL, "(message, offset in the last buffer) of the last error, or None", NULL},
    {"rows", (getter)Scanner_get_rows, NULL, "elements scanned so far", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit.ingest._kscan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(cat_classes): scans a traceEvents array into columns",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_kscan", "Native scanner of Kineto traceEvents arrays", -1,
                                    NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kscan(void) {
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&ColumnType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "NEED", ST_NEED);
    PyModule_AddIntConstant(m, "END", ST_END);
    PyModule_AddIntConstant(m, "ERROR", ST_ERROR);
    PyModule_AddIntConstant(m, "VERSION", 3);
    /* The enums Python reads the result by: routes, cat classes and row flags (one definition, here). */
    static const struct { const char *name; long value; } consts[] = {
        {"R_SKIP_NOTOBJ", R_SKIP_NOTOBJ}, {"R_SKIP_NOTS", R_SKIP_NOTS}, {"R_GPU", R_GPU}, {"R_RUNTIME", R_RUNTIME},
        {"R_CPU", R_CPU}, {"R_ANNOT", R_ANNOT}, {"R_MEMORY", R_MEMORY}, {"R_COUNTERS", R_COUNTERS},
        {"R_OTHER", R_OTHER}, {"N_ROUTES", R_OTHER + 1},
        {"C_NONE", C_NONE}, {"C_GPU", C_GPU}, {"C_RUNTIME", C_RUNTIME}, {"C_CPU", C_CPU}, {"C_ANNOT", C_ANNOT},
        {"C_AC2G", C_AC2G},
        {"F_TS_OK", F_TS_OK}, {"F_TS_OVF", F_TS_OVF}, {"F_DUR_OK", F_DUR_OK}, {"F_DUR_OVF", F_DUR_OVF},
        {"F_PID_OK", F_PID_OK}, {"F_TID_OK", F_TID_OK}, {"F_COERCED", F_COERCED},
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) {
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
