/* Portable core of the DUT shim: command parser, input buffer, downloads, inference loop and
 * reply formatting. Written in C99 without printf so that every target formats replies alike
 * (some embedded C libraries print no floats). Protocol: protocols/dut/SPEC.md. */
#include "dut_shim.h"

#include <math.h>
#include <string.h>

#include "asc_model.h"
#include "crc32.h"
#include "dut_port.h"

/* Bytes per m-buffer- line of `db print`. */
#define DUMP_BYTES_PER_LINE 16
/* Words of a command looked at; no command has more arguments, extra words are ignored. */
#define MAX_WORDS 4
/* Hex digits of the CRC in `bload <n> <crc>` and m-bload-done-<crc>. */
#define CRC_HEX_DIGITS 8

static dut_config g_cfg;

/* The command being received, up to its '%'. */
static char g_cmd[DUT_COMMAND_CAPACITY + 1];
static size_t g_cmd_len;

/* The input buffer: `g_pos` bytes have arrived since the last download announced `g_expected`. */
static uint8_t g_input[DUT_INPUT_CAPACITY];
static uint32_t g_expected;
static uint32_t g_pos;

/* The lap counter at the last two timestamps of `infer`: in energy mode printed once the window
 * has closed (capability elap: no UART traffic inside a timed window); in both modes printed
 * again by `laps` (capability lapcrc). `g_have_laps`: an infer has completed since reset. */
static uint32_t g_pulse_lap[2];
static int g_have_laps;

/* Scores of the last inference; `results` prints m-results-[] before the first one. */
static float g_scores[ASC_MODEL_CLASSES];
static int g_have_scores;

/* Capability rcrc: once the host has asked `caps`, result lines end with -crc-<8 hex>, the
 * CRC-32 of the text before it; lap lines too (capability lapcrc). Off after reset, so the
 * reference runner sees plain lines. */
static int g_result_crc;
/* While a result line is written: 1, and `put` adds what it writes to `g_line_crc`. */
static int g_line_crc_on;
static uint32_t g_line_crc;

/* -- output --------------------------------------------------------------------------------- */
static void put(const char *s)
{
    size_t n = strlen(s);
    if (g_line_crc_on) {
        g_line_crc = crc32_update(g_line_crc, (const uint8_t *)s, n);
    }
    port_write(s, n);
}

static void end_line(void)
{
    port_write("\r\n", 2);
}

static void put_line(const char *s)
{
    put(s);
    end_line();
}

static void put_u32(uint32_t v)
{
    char digits[11];
    size_t i = sizeof digits - 1;
    digits[i] = '\0';
    do {
        digits[--i] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v != 0u);
    put(&digits[i]);
}

static void put_hex8(uint32_t v)
{
    static const char hex[] = "0123456789abcdef";
    char text[CRC_HEX_DIGITS + 1];
    int i;
    for (i = CRC_HEX_DIGITS - 1; i >= 0; i--) {
        text[i] = hex[v & 0xFu];
        v >>= 4;
    }
    text[CRC_HEX_DIGITS] = '\0';
    put(text);
}

/* A score with 3 decimals, rounded exactly as printf("%.3f") and Python's format() round it. */
static void put_score(float score)
{
    double x = (double)score;
    double whole;
    double rest;
    unsigned long long k;
    char digits[24];
    size_t i = sizeof digits - 1;
    int places = 0;

    if (x != x) {
        put("nan");
        return;
    }
    if (signbit(x)) {
        put("-");
        x = -x;
    }
    /* A score this large means a broken model; "inf" keeps the reply line parseable. */
    if (isinf(x) || x >= 9.0e15) {
        put("inf");
        return;
    }
    /* Exact: a float has 24 significant bits and 1000 needs 10, a double holds 53. */
    x *= 1000.0;
    whole = floor(x);
    rest = x - whole;
    k = (unsigned long long)whole;
    /* Round half to even, as the C library and Python do for an exact tie. */
    if (rest > 0.5 || (rest == 0.5 && (k & 1u))) {
        k++;
    }
    digits[i] = '\0';
    do {
        digits[--i] = (char)('0' + (int)(k % 10u));
        k /= 10u;
        if (++places == 3) {
            digits[--i] = '.';
        }
    } while (k != 0u || places < 4);
    put(&digits[i]);
}

/* Start a line whose CRC-32 ends it once `caps` was asked (rcrc, lapcrc). */
static void begin_checked_line(void)
{
    g_line_crc = 0u;
    g_line_crc_on = 1;
}

/* End it: "-crc-<8 hex>" when rcrc is on, then the line end. */
static void end_checked_line(void)
{
    g_line_crc_on = 0;
    if (g_result_crc) {
        put("-crc-");
        put_hex8(g_line_crc);
    }
    end_line();
}

static void put_results(void)
{
    begin_checked_line();
    put("m-results-[");
    if (g_have_scores) {
        int c;
        for (c = 0; c < ASC_MODEL_CLASSES; c++) {
            if (c > 0) {
                put(",");
            }
            put_score(g_scores[c]);
        }
    }
    put("]");
    end_checked_line();
}

static void put_error(const char *text)
{
    put("e-[");
    put(text);
    put_line("]");
}

static const char *mode_name(void)
{
    return g_cfg.mode == DUT_MODE_ENERGY ? "energy" : "performance";
}

/* -- parsing -------------------------------------------------------------------------------- */
static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* Split `text` in place at whitespace; returns the number of words (at most `max`). */
static int split_words(char *text, char **words, int max)
{
    int n = 0;
    char *p = text;
    while (*p != '\0' && n < max) {
        while (is_space(*p)) {
            p++;
        }
        if (*p == '\0') {
            break;
        }
        words[n++] = p;
        while (*p != '\0' && !is_space(*p)) {
            p++;
        }
        if (*p != '\0') {
            *p++ = '\0';
        }
    }
    return n;
}

/* Result of parse_count(). */
enum { COUNT_BAD = 0, COUNT_OK = 1, COUNT_HUGE = 2 };

/* A byte count written with decimal digits only (no sign). COUNT_HUGE: above 32 bits. */
static int parse_count(const char *text, uint32_t *out)
{
    uint32_t v = 0;
    int huge = 0;
    if (*text == '\0') {
        return COUNT_BAD;
    }
    for (; *text != '\0'; text++) {
        uint32_t d;
        if (*text < '0' || *text > '9') {
            return COUNT_BAD;
        }
        d = (uint32_t)(*text - '0');
        if (v > (0xFFFFFFFFu - d) / 10u) {
            huge = 1;
        } else {
            v = v * 10u + d;
        }
    }
    *out = v;
    return huge ? COUNT_HUGE : COUNT_OK;
}

/* A count as the DUT echoes it: the digits without leading zeros, however long. */
static void put_count_text(const char *digits)
{
    while (digits[0] == '0' && digits[1] != '\0') {
        digits++;
    }
    put(digits);
}

/* Like C's atoi (leading sign and digits, anything else ends the number, no digits is 0), but
 * saturating instead of undefined on overflow. */
static long parse_int_prefix(const char *text)
{
    const long limit = 2147483647L;
    long v = 0;
    int negative = 0;
    if (*text == '+' || *text == '-') {
        negative = *text == '-';
        text++;
    }
    for (; *text >= '0' && *text <= '9'; text++) {
        v = v > (limit - (*text - '0')) / 10 ? limit : v * 10 + (*text - '0');
    }
    return negative ? -v : v;
}

/* -- commands ------------------------------------------------------------------------------- */
static void cmd_db_load(const char *arg)
{
    uint32_t n = 0;
    int kind = parse_count(arg, &n);
    if (kind == COUNT_BAD || n == 0u) {
        put("e-[Invalid byte count '");
        put(arg);
        put_line("']");
        return;
    }
    if (kind == COUNT_HUGE || n > DUT_INPUT_CAPACITY) {
        put("e-[Cannot load ");
        put_count_text(arg);
        put(" bytes: the buffer holds ");
        put_u32(DUT_INPUT_CAPACITY);
        put_line("]");
        return;
    }
    g_expected = n;
    g_pos = 0;
    put("m-[Expecting ");
    put_u32(n);
    put_line(" bytes]");
}

static void cmd_db_print(void)
{
    static const char hex[] = "0123456789abcdef";
    uint32_t i = 0;
    if (g_pos == 0u) {
        put_line("m-buffer-");
        return;
    }
    while (i < g_pos) {
        uint32_t end = i + DUMP_BYTES_PER_LINE < g_pos ? i + DUMP_BYTES_PER_LINE : g_pos;
        put("m-buffer-");
        for (; i < end; i++) {
            char pair[4];
            size_t len = 0;
            if (i % DUMP_BYTES_PER_LINE != 0u) {
                pair[len++] = '-';
            }
            pair[len++] = hex[g_input[i] >> 4];
            pair[len++] = hex[g_input[i] & 0xFu];
            port_write(pair, len);
        }
        end_line();
    }
}

/* `db crc` (capability dbcrc): the count and CRC-32 of the bytes received since `db load`, so
 * that the host checks a hex download without reading it back (~4 characters per byte). */
static void cmd_db_crc(void)
{
    put("m-db-crc-");
    put_u32(g_pos);
    put("-");
    put_hex8(crc32_update(0u, g_input, (size_t)g_pos));
    end_line();
}

static void cmd_db_hex(const char *digits)
{
    size_t len = strlen(digits);
    size_t i;
    uint32_t n;
    if (len % 2u != 0u) {
        put_error("Insufficent number of hex digits"); /* sic: the reference firmware's text */
        return;
    }
    for (i = 0; i < len; i += 2u) {
        if (hex_value(digits[i]) < 0 || hex_value(digits[i + 1u]) < 0) {
            char pair[3];
            pair[0] = digits[i];
            pair[1] = digits[i + 1u];
            pair[2] = '\0';
            put("e-[Invalid hex digit '");
            put(pair);
            put_line("']");
            return;
        }
    }
    n = (uint32_t)(len / 2u);
    if (g_pos + n > g_expected) {
        put("e-[Buffer overflow: more than the ");
        put_u32(g_expected);
        put_line(" bytes announced]");
        return;
    }
    for (i = 0; i < len; i += 2u) {
        g_input[g_pos++] = (uint8_t)(hex_value(digits[i]) * 16 + hex_value(digits[i + 1u]));
    }
    if (g_pos == g_expected) {
        put_line("m-load-done");
    }
}

static void cmd_db(int argc, char **words)
{
    if (strcmp(words[1], "load") == 0) {
        cmd_db_load(argc > 2 ? words[2] : "");
    } else if (strcmp(words[1], "print") == 0) {
        cmd_db_print();
    } else if (strcmp(words[1], "crc") == 0) {
        cmd_db_crc();
    } else {
        cmd_db_hex(words[1]);
    }
}

static void put_lap(uint32_t us)
{
    begin_checked_line();
    put("m-lap-us-");
    put_u32(us);
    end_checked_line();
}

/* One timestamp now: a GPIO edge in energy mode, a lap line in performance mode; the lap
 * counter is latched in *lap when lap is not NULL. */
static void timestamp_now(uint32_t *lap)
{
    if (g_cfg.mode == DUT_MODE_ENERGY) {
        if (lap != NULL) {
            *lap = port_timer_us();
        }
        port_timestamp();
    } else {
        uint32_t us = port_timer_us();
        if (lap != NULL) {
            *lap = us;
        }
        put_lap(us);
    }
}

/* `laps` (capability lapcrc): the last infer's two lap lines again; idempotent, so a host that
 * read them garbled asks again instead of running the inferences again. */
static void cmd_laps(void)
{
    if (!g_have_laps) {
        put_error("No inference yet");
        return;
    }
    put_lap(g_pulse_lap[0]);
    put_lap(g_pulse_lap[1]);
}

/* Run the model once on the input; 0 on success, else the model's error code. */
static int infer_once(float *scores)
{
    int rc = asc_model_infer(g_input, (size_t)g_pos, scores);
    if (rc == 0) {
        port_inference_done();
    }
    return rc;
}

static void cmd_infer(int argc, char **words)
{
    long n = argc > 1 ? parse_int_prefix(words[1]) : DUT_DEFAULT_ITERATIONS;
    long warmup = argc > 2 ? parse_int_prefix(words[2]) : DUT_DEFAULT_WARMUP;
    float scores[ASC_MODEL_CLASSES];
    long i;
    int rc = 0;

    if (n <= 0) {
        put_error("Inference iterations must be >0");
        return;
    }
    if (warmup < 0) {
        put_error("Inference warmup must be >=0");
        return;
    }
    if (g_pos != (uint32_t)ASC_MODEL_INPUT_BYTES) {
        put("e-[Input is ");
        put_u32(g_pos);
        put(" bytes, the model needs ");
        put_u32((uint32_t)ASC_MODEL_INPUT_BYTES);
        put_line("]");
        return;
    }

    port_compute_begin();
    g_have_laps = 0;
    put("m-warmup-start-");
    put_u32((uint32_t)warmup);
    end_line();
    port_flush_output();
    for (i = 0; i < warmup && rc == 0; i++) {
        rc = infer_once(scores);
    }
    if (rc == 0) {
        put_line("m-warmup-done");
        put("m-infer-start-");
        put_u32((uint32_t)n);
        end_line();
        /* Everything printed so far leaves before the window opens. */
        port_flush_output();
        timestamp_now(&g_pulse_lap[0]);
        for (i = 0; i < n && rc == 0; i++) {
            rc = infer_once(scores);
        }
    }
    if (rc == 0) {
        timestamp_now(&g_pulse_lap[1]);
        g_have_laps = 1;
        if (g_cfg.mode == DUT_MODE_ENERGY) {
            /* elap: the window is closed, the DUT's own clock of it may go out now. */
            put_lap(g_pulse_lap[0]);
            put_lap(g_pulse_lap[1]);
        }
        memcpy(g_scores, scores, sizeof g_scores);
        g_have_scores = 1;
        put_line("m-infer-done");
        put_results();
    } else {
        put("e-[Model failed: error ");
        put_u32((uint32_t)(rc < 0 ? -rc : rc));
        put_line("]");
    }
    port_flush_output();
    port_compute_end();
}

static void cmd_timestamp(void)
{
    port_compute_begin();
    timestamp_now(NULL);
    port_flush_output();
    port_compute_end();
}

static void cmd_caps(void)
{
    g_result_crc = 1;
    put("m-timestamp-mode-");
    put_line(mode_name());
    put_line(g_cfg.mode == DUT_MODE_ENERGY ? "m-caps-[" DUT_CAPABILITIES "," DUT_CAP_ELAP "]"
                                           : "m-caps-[" DUT_CAPABILITIES "]");
}

/* Exactly CRC_HEX_DIGITS lowercase hex digits. */
static int parse_crc(const char *text, uint32_t *out)
{
    uint32_t v = 0;
    int i;
    for (i = 0; i < CRC_HEX_DIGITS; i++) {
        char c = text[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return 0;
        }
        v = (v << 4) | (uint32_t)hex_value(c);
    }
    if (text[CRC_HEX_DIGITS] != '\0') {
        return 0;
    }
    *out = v;
    return 1;
}

static void cmd_bload(int argc, char **words)
{
    uint32_t n = 0;
    uint32_t want_crc = 0;
    uint32_t got_crc;
    uint32_t k;
    int kind = argc == 3 ? parse_count(words[1], &n) : COUNT_BAD;

    if (kind == COUNT_BAD || n == 0u || !parse_crc(words[2], &want_crc)) {
        put_error("bload bad arguments");
        return;
    }
    if (kind == COUNT_HUGE || n > DUT_INPUT_CAPACITY) {
        put("e-[bload too large: ");
        put_count_text(words[1]);
        put(" > ");
        put_u32(DUT_INPUT_CAPACITY);
        put_line("]");
        return;
    }
    put("m-bload-ready-");
    put_u32(n);
    end_line();
    /* The host sends the payload only once it has seen the ready line. */
    port_flush_output();

    for (k = 0; k < n; k++) {
        int c = port_read_byte(DUT_BLOAD_BYTE_TIMEOUT_MS);
        if (c < 0) {
            break;
        }
        g_input[k] = (uint8_t)c;
    }
    if (k < n) {
        /* The buffer now holds a partial payload: refuse to infer on it. */
        g_expected = g_pos = 0;
        put("e-[bload timeout: got ");
        put_u32(k);
        put(" of ");
        put_u32(n);
        put_line(" bytes]");
        return;
    }
    got_crc = crc32_update(0u, g_input, n);
    if (got_crc != want_crc) {
        g_expected = g_pos = 0;
        put("e-[bload crc mismatch: expected ");
        put_hex8(want_crc);
        put(" got ");
        put_hex8(got_crc);
        put_line("]");
        return;
    }
    g_expected = g_pos = n;
    put("m-bload-done-");
    put_hex8(got_crc);
    end_line();
}

static void cmd_unknown(const char *text)
{
    put("e-[Unknown command: ");
    put(text);
    put_line("]");
}

/* Run one command (the text between two '%', already cut to the buffer's capacity). */
static void run_command(const char *raw)
{
    char text[DUT_COMMAND_CAPACITY + 1];
    char words_buf[DUT_COMMAND_CAPACITY + 1];
    char *words[MAX_WORDS];
    size_t start = 0;
    size_t end = strlen(raw);
    int argc;

    /* Surrounding whitespace is no part of a command (the error echo shows it stripped). */
    while (start < end && is_space(raw[start])) {
        start++;
    }
    while (end > start && is_space(raw[end - 1u])) {
        end--;
    }
    memcpy(text, raw + start, end - start);
    text[end - start] = '\0';
    memcpy(words_buf, text, end - start + 1u);
    argc = split_words(words_buf, words, MAX_WORDS);

    if (argc == 0) {
        cmd_unknown(text);
    } else if (strcmp(words[0], "name") == 0) {
        put("m-name-" DUT_NAME "-[");
        put(g_cfg.vendor != NULL ? g_cfg.vendor : "unspecified");
        put_line("]");
    } else if (strcmp(words[0], "profile") == 0) {
        put_line("m-profile-[" DUT_PROFILE "]");
        put("m-model-[");
        put(ASC_MODEL_ID);
        put_line("]");
    } else if (strcmp(words[0], "db") == 0 && argc >= 2) {
        cmd_db(argc, words);
    } else if (strcmp(words[0], "infer") == 0) {
        cmd_infer(argc, words);
    } else if (strcmp(words[0], "results") == 0) {
        put_results();
    } else if (strcmp(words[0], "timestamp") == 0) {
        cmd_timestamp();
    } else if (strcmp(words[0], "caps") == 0) {
        cmd_caps();
    } else if (strcmp(words[0], "bload") == 0) {
        cmd_bload(argc, words);
    } else if (strcmp(words[0], "laps") == 0) {
        cmd_laps();
    } else {
        cmd_unknown(text);
    }
}

/* -- entry points --------------------------------------------------------------------------- */
void dut_init(const dut_config *cfg)
{
    g_cfg = *cfg;
    g_cmd_len = 0;
    g_expected = g_pos = 0;
    g_have_scores = 0;
    g_have_laps = 0;
    g_result_crc = 0;
    g_line_crc_on = 0;
    memset(g_input, 0, sizeof g_input);
    put("m-timestamp-mode-");
    put_line(mode_name());
    put_line("m-init-done");
    put_line("m-ready");
    port_flush_output();
}

void dut_rx_char(char c)
{
    if (c == '%') {
        char text[DUT_COMMAND_CAPACITY + 1];
        memcpy(text, g_cmd, g_cmd_len);
        text[g_cmd_len] = '\0';
        g_cmd_len = 0;
        run_command(text);
        put_line("m-ready");
        port_flush_output();
    } else if (g_cmd_len < DUT_COMMAND_CAPACITY) {
        g_cmd[g_cmd_len++] = c;
    }
}
