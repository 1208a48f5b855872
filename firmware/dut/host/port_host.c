/* Linux host port of the DUT shim (../core/dut_port.h).
 *
 * UART: raw bytes on file descriptors, stdin/stdout by default (the virtual bench passes a pty's
 * device side) or a pty the shim opens itself (--pty). Output is buffered and written at
 * port_flush_output(), never blocking for long: bytes nobody reads within a while are dropped,
 * as on a UART with nothing attached.
 *
 * Time: standalone, the timer is CLOCK_MONOTONIC since start and inferences take the real time
 * they take; energy-mode timestamps go to stderr as "gpio-fall <us>". On the sim bus
 * (RIG_SIMBUS_FD, see firmware/dut/README.md) the port keeps a local simulated time from `begin`
 * on, declares every inference and timestamp to the bench, and releases output only after the
 * bench's clock has reached the local time (`wait`).
 */
#define _GNU_SOURCE /* posix_openpt, ptsname, cfmakeraw with -std=c99 */

#include "port_host.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "dut_port.h"

/* How long a write may wait for the reader before the rest of it is dropped. */
#define WRITE_STALL_MS 500
/* Largest single write(): small enough that a blocking pty write never waits long. */
#define WRITE_CHUNK 512
/* Deadline for the bench's reply to `begin` (it answers at once; only a dead bench is slower). */
#define BEGIN_REPLY_MS 10000

/* -- UART ----------------------------------------------------------------------------------- */
static int g_in_fd = STDIN_FILENO;
static int g_out_fd = STDOUT_FILENO;
/* Keeps our own pty's slave open (--pty) so the rig may close and reopen the port. */
static int g_pty_slave = -1;
static int g_uart_closed;

static unsigned char g_rx[4096];
static size_t g_rx_len;
static size_t g_rx_pos;

static char g_tx[4096];
static size_t g_tx_len;

/* -- time ----------------------------------------------------------------------------------- */
static struct timespec g_start;

/* -- sim bus -------------------------------------------------------------------------------- */
static int g_bus_fd = -1;
static long long g_inference_ns;
static long long g_power_on_ns;
/* Inside begin..end: the local simulated time, and the latest time the bench confirmed. */
static int g_in_span;
static long long g_t;
static long long g_confirmed;
static char g_bus_rx[256];
static size_t g_bus_len;

static long long monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long elapsed_ms_since(long long t0_ns)
{
    return (monotonic_ns() - t0_ns) / 1000000LL;
}

static void on_signal(int sig)
{
    (void)sig;
    _exit(0); /* a power cut: nothing to save, and it interrupts any blocking call at once */
}

void port_host_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* A closed pty or bus shows up as EPIPE/EIO from write() instead of killing us. */
    signal(SIGPIPE, SIG_IGN);
}

/* -- bus ------------------------------------------------------------------------------------ */
static void bus_fail(const char *what)
{
    fprintf(stderr, "dut-host: sim bus: %s; stopping\n", what);
    _exit(PORT_HOST_EXIT_BUS);
}

static void bus_send(const char *line)
{
    size_t n = strlen(line);
    const char *p = line;
    while (n > 0) {
        ssize_t w = write(g_bus_fd, p, n);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            bus_fail("the bench closed the bus");
        }
        p += w;
        n -= (size_t)w;
    }
}

/* The bench's next reply line (without '\n'). timeout_ms < 0: no deadline, because a `wait`
 * lasts as long as simulated time needs, which may be slower than host time; the bench owns
 * this process and ends it (or closes the bus) when it goes away. */
static void bus_read_line(char *out, size_t out_size, int timeout_ms)
{
    long long t0 = monotonic_ns();
    for (;;) {
        char *nl = memchr(g_bus_rx, '\n', g_bus_len);
        struct pollfd p;
        int left = -1;
        int r;
        ssize_t got;
        if (nl != NULL) {
            size_t len = (size_t)(nl - g_bus_rx);
            if (len >= out_size) {
                bus_fail("reply line too long");
            }
            memcpy(out, g_bus_rx, len);
            out[len] = '\0';
            memmove(g_bus_rx, nl + 1, g_bus_len - len - 1u);
            g_bus_len -= len + 1u;
            return;
        }
        if (g_bus_len == sizeof g_bus_rx) {
            bus_fail("reply line too long");
        }
        if (timeout_ms >= 0) {
            left = timeout_ms - (int)elapsed_ms_since(t0);
            if (left <= 0) {
                bus_fail("no reply from the bench in time");
            }
        }
        p.fd = g_bus_fd;
        p.events = POLLIN;
        p.revents = 0;
        r = poll(&p, 1, left);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            continue; /* the deadline check above ends this */
        }
        got = read(g_bus_fd, g_bus_rx + g_bus_len, sizeof g_bus_rx - g_bus_len);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            bus_fail("the bench closed the bus");
        }
        g_bus_len += (size_t)got;
    }
}

static int parse_ll(const char *text, long long *out)
{
    char *end = NULL;
    long long v;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') {
        return 0;
    }
    *out = v;
    return 1;
}

/* Block until the bench's clock has reached the local simulated time. */
static void bus_wait_local_time(void)
{
    char line[64];
    char reply[64];
    if (g_t <= g_confirmed) {
        return;
    }
    snprintf(line, sizeof line, "wait %lld\n", g_t);
    bus_send(line);
    bus_read_line(reply, sizeof reply, -1);
    if (strcmp(reply, "ok") != 0) {
        bus_fail("unexpected reply to wait");
    }
    g_confirmed = g_t;
}

int port_host_join_simbus(char *err, size_t err_size)
{
    const char *fd_text = getenv("RIG_SIMBUS_FD");
    const char *inf_text = getenv("RIG_SIM_INFERENCE_NS");
    const char *on_text = getenv("RIG_SIM_POWER_ON_NS");
    long long fd = -1;

    clock_gettime(CLOCK_MONOTONIC, &g_start);
    if (fd_text == NULL || fd_text[0] == '\0') {
        return 0;
    }
    if (!parse_ll(fd_text, &fd) || fd < 0 || fd > 1000000 || fcntl((int)fd, F_GETFD) < 0) {
        snprintf(err, err_size, "RIG_SIMBUS_FD=%s is not an open file descriptor", fd_text);
        return -1;
    }
    if (inf_text == NULL || !parse_ll(inf_text, &g_inference_ns) || g_inference_ns <= 0) {
        snprintf(err, err_size,
                 "RIG_SIM_INFERENCE_NS must be a positive integer (ns) on the sim bus, got '%s'",
                 inf_text != NULL ? inf_text : "");
        return -1;
    }
    if (on_text == NULL || !parse_ll(on_text, &g_power_on_ns) || g_power_on_ns < 0) {
        snprintf(err, err_size,
                 "RIG_SIM_POWER_ON_NS must be a non-negative integer (ns) on the sim bus, got '%s'",
                 on_text != NULL ? on_text : "");
        return -1;
    }
    g_bus_fd = (int)fd;
    g_t = g_confirmed = g_power_on_ns;
    return 1;
}

/* -- UART ----------------------------------------------------------------------------------- */
int port_host_open_uart(int use_pty, char *err, size_t err_size)
{
    struct termios tio;
    int master;
    const char *name;
    if (!use_pty) {
        return 0;
    }
    master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0 ||
        (name = ptsname(master)) == NULL) {
        snprintf(err, err_size, "cannot open a pty: %s", strerror(errno));
        return -1;
    }
    g_pty_slave = open(name, O_RDWR | O_NOCTTY);
    if (g_pty_slave < 0) {
        snprintf(err, err_size, "cannot open %s: %s", name, strerror(errno));
        return -1;
    }
    /* Raw both ways: bytes pass unchanged (no CR/LF translation, no echo, no line editing). */
    if (tcgetattr(g_pty_slave, &tio) == 0) {
        cfmakeraw(&tio);
        tcsetattr(g_pty_slave, TCSANOW, &tio);
    }
    if (tcgetattr(master, &tio) == 0) {
        cfmakeraw(&tio);
        tcsetattr(master, TCSANOW, &tio);
    }
    g_in_fd = g_out_fd = master;
    fprintf(stderr, "port: %s\n", name);
    return 0;
}

int port_read_byte(uint32_t timeout_ms)
{
    long long t0 = monotonic_ns();
    if (g_rx_pos < g_rx_len) {
        return g_rx[g_rx_pos++];
    }
    while (!g_uart_closed) {
        struct pollfd p;
        long long left = (long long)timeout_ms - elapsed_ms_since(t0);
        int r;
        ssize_t got;
        p.fd = g_in_fd;
        p.events = POLLIN;
        p.revents = 0;
        r = poll(&p, 1, left > 0 ? (int)left : 0);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            g_uart_closed = 1;
            break;
        }
        if (r == 0) {
            return PORT_TIMEOUT;
        }
        got = read(g_in_fd, g_rx, sizeof g_rx);
        if (got > 0) {
            g_rx_len = (size_t)got;
            g_rx_pos = 1;
            return g_rx[0];
        }
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        /* End of file, or EIO from a pty whose other side is gone for good. */
        g_uart_closed = 1;
    }
    return PORT_CLOSED;
}

static void uart_write_all(const char *data, size_t n)
{
    long long stalled_since = monotonic_ns();
    while (n > 0 && !g_uart_closed) {
        struct pollfd p;
        int r;
        ssize_t w;
        long long left = WRITE_STALL_MS - elapsed_ms_since(stalled_since);
        if (left <= 0) {
            return; /* nobody reads: the rest is lost, as on a real UART */
        }
        p.fd = g_out_fd;
        p.events = POLLOUT;
        p.revents = 0;
        r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            continue;
        }
        w = write(g_out_fd, data, n < WRITE_CHUNK ? n : WRITE_CHUNK);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                continue;
            }
            g_uart_closed = 1;
            return;
        }
        data += w;
        n -= (size_t)w;
        stalled_since = monotonic_ns();
    }
}

void port_write(const char *s, size_t n)
{
    while (n > 0) {
        size_t room = sizeof g_tx - g_tx_len;
        size_t take = n < room ? n : room;
        memcpy(g_tx + g_tx_len, s, take);
        g_tx_len += take;
        s += take;
        n -= take;
        if (g_tx_len == sizeof g_tx) {
            port_flush_output();
        }
    }
}

void port_flush_output(void)
{
    if (g_tx_len == 0) {
        return;
    }
    if (g_bus_fd >= 0 && g_in_span) {
        bus_wait_local_time();
    }
    uart_write_all(g_tx, g_tx_len);
    g_tx_len = 0;
}

/* -- time ----------------------------------------------------------------------------------- */
uint32_t port_timer_us(void)
{
    long long since_on_ns;
    if (g_bus_fd >= 0) {
        since_on_ns = g_t - g_power_on_ns;
    } else {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        since_on_ns = (long long)(now.tv_sec - g_start.tv_sec) * 1000000000LL +
                      (now.tv_nsec - g_start.tv_nsec);
    }
    if (since_on_ns < 0) {
        since_on_ns = 0;
    }
    return (uint32_t)(((unsigned long long)since_on_ns / 1000ULL) & 0xFFFFFFFFULL);
}

void port_timestamp(void)
{
    char line[64];
    if (g_bus_fd >= 0) {
        snprintf(line, sizeof line, "pulse %lld\n", g_t);
        bus_send(line);
    } else {
        fprintf(stderr, "gpio-fall %lu\n", (unsigned long)port_timer_us());
    }
}

void port_compute_begin(void)
{
    char reply[64];
    long long now;
    if (g_bus_fd < 0) {
        return;
    }
    port_flush_output(); /* earlier output is not part of this span */
    bus_send("begin\n");
    bus_read_line(reply, sizeof reply, BEGIN_REPLY_MS);
    if (!parse_ll(reply, &now)) {
        bus_fail("the reply to begin is not an integer");
    }
    g_t = g_confirmed = now;
    g_in_span = 1;
}

void port_inference_done(void)
{
    char line[80];
    if (g_bus_fd < 0) {
        return;
    }
    snprintf(line, sizeof line, "act %lld %lld\n", g_t, g_t + g_inference_ns);
    bus_send(line);
    g_t += g_inference_ns;
}

void port_compute_end(void)
{
    char line[64];
    if (g_bus_fd < 0) {
        return;
    }
    port_flush_output();
    snprintf(line, sizeof line, "end %lld\n", g_t);
    bus_send(line);
    g_in_span = 0;
}
