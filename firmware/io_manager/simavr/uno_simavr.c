/* uno-simavr: the IO manager sketch's real AVR build (io_manager.ino, ATmega328P at 16 MHz) run
 * on libsimavr and wired as on the bench:
 *
 *   uno-simavr [--dut PATH] [--speed X] [--clock] ELF
 *
 * - UART0 (the UNO's USB serial to the host, 115200 baud) is a new pty; its path is printed on
 *   stdout as "port: /dev/pts/N" once the AVR runs. Bytes from the rig enter the AVR's UART at
 *   its baud rate in simulated time (simavr's UART paces them), never faster than its receive
 *   FIFO takes them (XON/XOFF from simavr's UART).
 * - The SoftwareSerial pins to the DUT (D11 = PB3: UNO TX, D10 = PB2: UNO RX, 9600 baud) are
 *   bridged bit by bit in simulated cycles to the serial device PATH (the DUT's UART, e.g. the
 *   pty the host build of the DUT shim serves): a falling edge of PB3 starts a frame, which is
 *   sampled at the middle of each bit; a byte whose stop bit is low is a framing error, dropped
 *   and counted. Bytes from the DUT are clocked onto PB2 as start bit, 8 data bits LSB first
 *   and stop bit, each 1/9600 s of simulated time, one frame after the other.
 * - D3 (timestamp input, INT1) and D4 (DUT reset) are not wired: D3 stays high (no edges), D4's
 *   level is only logged on stderr. See README.md.
 *
 * Everything runs on one thread: the pty and DUT I/O is done from a simavr cycle timer every
 * millisecond of simulated time, so no byte is raised into the AVR from another thread.
 * --speed caps simulated seconds per wall second (1 is a real UNO's pace). Without it (0) the
 * AVR runs as fast as the host allows, and once no byte or edge has crossed any pin for 10 ms of
 * simulated time (the sketch can only be spinning in loop()) its clock stops until the next
 * byte arrives: simulated time then counts work, not waiting. With --clock it says so on stdout
 * after the port line, "idle <cycle>" as its clock stops and "busy <cycle>" as it runs again
 * ("busy 0" first), so that a virtual bench can hold its own time while the UNO works and then
 * move it on by the UNO's (virtual_bench/simavr_uno.py). Exits 0 on SIGTERM, SIGINT or SIGHUP,
 * or when its parent dies; 2 on bad arguments or a missing/unloadable ELF; 1 if the AVR
 * crashes. SIGUSR1 prints the counts it
 * prints on exit (simulated and wall time, bytes each way, framing errors) on stderr. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "avr_ioport.h"
#include "avr_uart.h"
#include "sim_avr.h"
#include "sim_elf.h"
#include "sim_irq.h"

#define EXIT_USAGE 2
#define F_CPU 16000000UL
#define DUT_BAUD 9600UL
/* How often (simulated) the pty and the DUT's device are served: 1 ms. */
#define POLL_CYCLES (F_CPU / 1000UL)
/* Bytes from the DUT waiting to be clocked onto PB2 (the DUT's UART sends at 9600 baud; its
 * side is a process that writes at once, so its bytes queue here). When full, the DUT's device
 * is not read until there is room. 256 KiB holds the largest reply of the host shim, a `db
 * print` of its whole 32 KiB buffer (about 119 KB), which it drops if nobody reads it. */
#define DUT_QUEUE 262144u
/* Bytes waiting for a writer that is not keeping up (the rig's pty, the DUT's device). */
#define OUT_QUEUE 65536u
/* Without --speed: after this much simulated time without a byte or an edge anywhere, the
 * sketch can only be spinning in loop(), and the clock stops until a byte arrives (10 ms: more
 * than simavr's UART takes to deliver a full 64-byte receive FIFO at 115200 baud). */
#define QUIET_CYCLES (F_CPU / 100UL)

/* Cycles from the start of a frame to the start of bit k (k = 0 start bit, 1..8 data, 9 stop):
 * exact to the cycle for 16 MHz / 9600 (1666.67 cycles per bit). */
static avr_cycle_count_t bit_start(unsigned k) { return (avr_cycle_count_t)(k * F_CPU / DUT_BAUD); }

typedef struct {
    uint8_t data[OUT_QUEUE];
    size_t head, len;
    unsigned long dropped;
} out_queue;

static volatile sig_atomic_t g_stop = 0;
/* The last cycle at which a byte or an edge crossed any of the UNO's pins. */
static avr_cycle_count_t g_last_activity = 0;
static unsigned long long g_idle_waits = 0;

static avr_t *g_avr;
static int g_host_master = -1, g_host_slave = -1, g_dut_fd = -1;
static double g_speed = 0.0;
/* --clock: where "idle"/"busy" lines go (NULL: nowhere). */
static FILE *g_clock_out = NULL;
static struct timespec g_wall_start;

/* UART0 */
static avr_irq_t *g_uart_in;
static int g_uart_xon = 0;
static uint8_t g_host_in[512];
static size_t g_host_in_len = 0, g_host_in_done = 0;
static out_queue g_to_host;

/* SoftwareSerial TX (PB3): frame decoding. */
static int g_tx_level = 1;
static int g_tx_busy = 0;
static avr_cycle_count_t g_tx_frame_start;
static unsigned g_tx_bit;
static unsigned g_tx_byte;
static out_queue g_to_dut;
static unsigned long g_framing_errors = 0, g_bytes_to_dut = 0;

/* SoftwareSerial RX (PB2): frame generation. */
static avr_irq_t *g_rx_pin;
static uint8_t g_dut_queue[DUT_QUEUE];
static size_t g_dq_head = 0, g_dq_len = 0;
static int g_rx_busy = 0;
static avr_cycle_count_t g_rx_frame_start;
static unsigned g_rx_bit;
static uint8_t g_rx_byte;
static unsigned long g_bytes_from_dut = 0;

static volatile sig_atomic_t g_report = 0;

static void on_signal(int sig) { (void)sig; g_stop = 1; }
static void on_report(int sig) { (void)sig; g_report = 1; }

static int set_raw(int fd)
{
    struct termios tio;
    if (tcgetattr(fd, &tio) < 0) return -1;
    cfmakeraw(&tio);
    return tcsetattr(fd, TCSANOW, &tio);
}

/* -- byte queues ------------------------------------------------------------------------------ */
static void out_push(out_queue *q, uint8_t byte)
{
    if (q->len == OUT_QUEUE) {
        q->dropped++; /* nobody reads: the newest byte is lost, as on a UART */
        return;
    }
    q->data[(q->head + q->len) % OUT_QUEUE] = byte;
    q->len++;
}

/* Write what the queue holds to fd without blocking; drop it all if fd is gone. */
static void out_flush(out_queue *q, int fd)
{
    while (q->len > 0) {
        size_t run = q->len;
        if (q->head + run > OUT_QUEUE) run = OUT_QUEUE - q->head;
        ssize_t n = fd >= 0 ? write(fd, q->data + q->head, run) : -1;
        if (n < 0) {
            if (fd >= 0 && (errno == EAGAIN || errno == EINTR)) return;
            q->dropped += q->len;
            q->head = q->len = 0;
            return;
        }
        q->head = (q->head + (size_t)n) % OUT_QUEUE;
        q->len -= (size_t)n;
    }
}

/* -- UART0: the host ---------------------------------------------------------------------------- */
static void on_uart_output(avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq; (void)param;
    out_push(&g_to_host, (uint8_t)value);
    g_last_activity = g_avr->cycle;
}

static void on_uart_xon(avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq; (void)value; (void)param;
    g_uart_xon = 1;
}

static void on_uart_xoff(avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq; (void)value; (void)param;
    g_uart_xon = 0;
}

static void serve_host(void)
{
    if (g_host_in_done == g_host_in_len) {
        ssize_t n = read(g_host_master, g_host_in, sizeof g_host_in);
        g_host_in_done = 0;
        g_host_in_len = n > 0 ? (size_t)n : 0;
    }
    /* simavr's UART queues them and delivers one per byte time at its baud rate. */
    while (g_uart_xon && g_host_in_done < g_host_in_len) {
        avr_raise_irq(g_uart_in, g_host_in[g_host_in_done++]);
        g_last_activity = g_avr->cycle;
    }
    out_flush(&g_to_host, g_host_master);
}

/* -- SoftwareSerial TX: PB3 -> the DUT ------------------------------------------------------- */
static avr_cycle_count_t sample_tx_bit(avr_t *avr, avr_cycle_count_t when, void *param)
{
    (void)avr; (void)when; (void)param;
    unsigned k = g_tx_bit;
    if (k >= 1 && k <= 8) {
        g_tx_byte |= (unsigned)g_tx_level << (k - 1);
    } else if (k == 9) {
        g_tx_busy = 0;
        if (g_tx_level) {
            out_push(&g_to_dut, (uint8_t)g_tx_byte);
            g_bytes_to_dut++;
        } else {
            g_framing_errors++;
        }
        return 0;
    } else if (g_tx_level) { /* k == 0: a glitch, not a start bit */
        g_tx_busy = 0;
        return 0;
    }
    g_tx_bit = k + 1;
    /* The middle of the next bit. */
    return g_tx_frame_start + (bit_start(k + 1) + bit_start(k + 2)) / 2;
}

static void on_tx_pin(avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq; (void)param;
    int level = value ? 1 : 0;
    if (level == g_tx_level) return;
    g_tx_level = level;
    g_last_activity = g_avr->cycle;
    if (!level && !g_tx_busy) {
        g_tx_busy = 1;
        g_tx_frame_start = g_avr->cycle;
        g_tx_bit = 0;
        g_tx_byte = 0;
        avr_cycle_timer_register(g_avr, bit_start(1) / 2, sample_tx_bit, NULL);
    }
}

/* -- SoftwareSerial RX: the DUT -> PB2 ------------------------------------------------------- */
/* Take the next queued byte and put its start bit on the line at cycle `start`. */
static void begin_rx_frame(avr_cycle_count_t start)
{
    g_rx_byte = g_dut_queue[g_dq_head];
    g_dq_head = (g_dq_head + 1) % DUT_QUEUE;
    g_dq_len--;
    g_bytes_from_dut++;
    g_rx_busy = 1;
    g_rx_bit = 0;
    g_rx_frame_start = start;
    g_last_activity = start;
    avr_raise_irq(g_rx_pin, 0); /* start bit */
}

static avr_cycle_count_t drive_rx_bit(avr_t *avr, avr_cycle_count_t when, void *param)
{
    (void)avr; (void)param;
    unsigned k = ++g_rx_bit;
    if (k <= 8) {
        avr_raise_irq(g_rx_pin, (g_rx_byte >> (k - 1)) & 1u);
    } else if (k == 9) {
        avr_raise_irq(g_rx_pin, 1); /* stop bit */
    } else {
        /* The stop bit has lasted its bit time: the next byte follows at once, as from a
         * UART with more to send, or the line stays idle. */
        g_rx_busy = 0;
        if (g_dq_len == 0) return 0;
        begin_rx_frame(when);
        return g_rx_frame_start + bit_start(1);
    }
    return g_rx_frame_start + bit_start(k + 1);
}

static void start_rx_frame(void)
{
    if (g_rx_busy || g_dq_len == 0) return;
    begin_rx_frame(g_avr->cycle);
    avr_cycle_timer_register(g_avr, bit_start(1), drive_rx_bit, NULL);
}

static void serve_dut(void)
{
    if (g_dut_fd < 0) return;
    while (g_dq_len < DUT_QUEUE) {
        uint8_t buf[4096];
        size_t room = DUT_QUEUE - g_dq_len;
        ssize_t n = read(g_dut_fd, buf, room < sizeof buf ? room : sizeof buf);
        if (n <= 0) break; /* EAGAIN, or EIO while nobody holds the DUT's side: idle line */
        for (ssize_t i = 0; i < n; i++)
            g_dut_queue[(g_dq_head + g_dq_len++) % DUT_QUEUE] = buf[i];
    }
    start_rx_frame();
    out_flush(&g_to_dut, g_dut_fd);
}

/* -- the other pins ----------------------------------------------------------------------------- */
static void on_reset_pin(avr_irq_t *irq, uint32_t value, void *param)
{
    (void)irq; (void)param;
    fprintf(stderr, "uno-simavr: D4 (DUT reset) %u at cycle %llu\n", value ? 1u : 0u,
            (unsigned long long)g_avr->cycle);
}

/* -- pacing and service ------------------------------------------------------------------------- */
static double wall_elapsed_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - g_wall_start.tv_sec) +
           (double)(now.tv_nsec - g_wall_start.tv_nsec) * 1e-9;
}

/* Nothing in flight and nothing heard for QUIET_CYCLES: wait for a byte with the clock
 * stopped (no cycles pass, so the AVR's state is exactly as it was). */
static void wait_while_idle(avr_t *avr)
{
    if (avr->cycle - g_last_activity < QUIET_CYCLES || g_tx_busy || g_rx_busy || g_dq_len ||
        g_host_in_done < g_host_in_len || g_to_host.len || g_to_dut.len)
        return;
    g_idle_waits++;
    if (g_clock_out != NULL) {
        fprintf(g_clock_out, "idle %llu\n", (unsigned long long)avr->cycle);
        fflush(g_clock_out);
    }
    struct pollfd fds[2] = {{g_host_master, POLLIN, 0}, {g_dut_fd, POLLIN, 0}};
    while (!g_stop) {
        int n = poll(fds, g_dut_fd >= 0 ? 2 : 1, 100);
        if (n > 0 && ((fds[0].revents & POLLIN) || (g_dut_fd >= 0 && (fds[1].revents & POLLIN))))
            break;
        if (n > 0) {
            /* EOF/EIO on the DUT's side (nobody holds it): stop watching it, keep waiting. */
            if (g_dut_fd >= 0 && (fds[1].revents & (POLLHUP | POLLERR | POLLNVAL))) fds[1].fd = -1;
            if (fds[0].revents & (POLLHUP | POLLERR | POLLNVAL)) { usleep(20000); }
        }
    }
    g_last_activity = avr->cycle;
    if (g_clock_out != NULL) {
        fprintf(g_clock_out, "busy %llu\n", (unsigned long long)avr->cycle);
        fflush(g_clock_out);
    }
}

/* What crossed the pins so far (on exit, and on SIGUSR1). */
static void report_counts(void)
{
    fprintf(stderr,
            "uno-simavr: %.3f s simulated in %.3f s wall; %lu bytes to the DUT, %lu from it, "
            "%lu framing errors; dropped: %lu to the host, %lu to the DUT; %llu idle waits\n",
            (double)g_avr->cycle / F_CPU, wall_elapsed_s(), g_bytes_to_dut, g_bytes_from_dut,
            g_framing_errors, g_to_host.dropped, g_to_dut.dropped, g_idle_waits);
}

static avr_cycle_count_t service(avr_t *avr, avr_cycle_count_t when, void *param)
{
    (void)param;
    if (g_report) {
        g_report = 0;
        report_counts();
    }
    serve_host();
    serve_dut();
    if (g_speed == 0.0) wait_while_idle(avr);
    if (g_speed > 0.0) {
        double ahead = (double)avr->cycle / F_CPU / g_speed - wall_elapsed_s();
        if (ahead > 0.001) {
            struct timespec pause = {(time_t)ahead, (long)((ahead - (double)(time_t)ahead) * 1e9)};
            nanosleep(&pause, NULL);
        }
    }
    return when + POLL_CYCLES;
}

static void usage(void)
{
    fputs("usage: uno-simavr [--dut PATH] [--speed X] [--clock] ELF\n", stderr);
}

int main(int argc, char **argv)
{
    const char *dut_path = NULL, *elf_path = NULL;
    int clock_lines = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--clock") == 0) {
            clock_lines = 1;
        } else if (strcmp(argv[i], "--dut") == 0 && i + 1 < argc) {
            dut_path = argv[++i];
        } else if (strcmp(argv[i], "--speed") == 0 && i + 1 < argc) {
            char *end;
            g_speed = strtod(argv[++i], &end);
            if (*end != '\0' || !(g_speed >= 0.0)) {
                fprintf(stderr, "uno-simavr: --speed %s: expected a number >= 0\n", argv[i]);
                return EXIT_USAGE;
            }
        } else if (argv[i][0] == '-' || elf_path != NULL) {
            fprintf(stderr, "uno-simavr: unexpected argument '%s'\n", argv[i]);
            usage();
            return EXIT_USAGE;
        } else {
            elf_path = argv[i];
        }
    }
    if (elf_path == NULL) {
        usage();
        return EXIT_USAGE;
    }
    /* stdout carries one line, the port: simavr's own messages go to stderr. */
    FILE *announce = fdopen(dup(STDOUT_FILENO), "w");
    dup2(STDERR_FILENO, STDOUT_FILENO);
    /* Started by the rig: never outlive it, whatever way it ends. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGUSR1, on_report);
    signal(SIGPIPE, SIG_IGN);

    elf_firmware_t fw;
    memset(&fw, 0, sizeof fw);
    if (access(elf_path, R_OK) != 0 || elf_read_firmware(elf_path, &fw) != 0) {
        fprintf(stderr, "uno-simavr: cannot load the ELF %s\n", elf_path);
        return EXIT_USAGE;
    }
    g_avr = avr_make_mcu_by_name("atmega328p");
    if (g_avr == NULL) {
        fputs("uno-simavr: simavr has no atmega328p\n", stderr);
        return EXIT_USAGE;
    }
    avr_init(g_avr);
    g_avr->frequency = F_CPU;
    avr_load_firmware(g_avr, &fw);
    g_avr->log = LOG_WARNING;

    if (dut_path != NULL) {
        g_dut_fd = open(dut_path, O_RDWR | O_NOCTTY | O_NONBLOCK);
        if (g_dut_fd < 0) {
            fprintf(stderr, "uno-simavr: cannot open the DUT's port %s: %s\n", dut_path,
                    strerror(errno));
            return EXIT_USAGE;
        }
        if (isatty(g_dut_fd)) set_raw(g_dut_fd);
    }
    char host_path[64];
    if (openpty(&g_host_master, &g_host_slave, host_path, NULL, NULL) < 0) {
        fprintf(stderr, "uno-simavr: cannot create a pty: %s\n", strerror(errno));
        return EXIT_USAGE;
    }
    /* Raw, and our own slave fd stays open so that the rig may close and reopen the port. */
    set_raw(g_host_slave);
    fcntl(g_host_master, F_SETFL, fcntl(g_host_master, F_GETFL) | O_NONBLOCK);

    /* UART0: no stdio dump, no sleeping while the firmware polls. */
    uint32_t flags = 0;
    avr_ioctl(g_avr, AVR_IOCTL_UART_GET_FLAGS('0'), &flags);
    flags &= ~(uint32_t)(AVR_UART_FLAG_STDIO | AVR_UART_FLAG_POLL_SLEEP);
    avr_ioctl(g_avr, AVR_IOCTL_UART_SET_FLAGS('0'), &flags);
    g_uart_in = avr_io_getirq(g_avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_INPUT);
    avr_irq_register_notify(avr_io_getirq(g_avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUTPUT),
                            on_uart_output, NULL);
    avr_irq_register_notify(avr_io_getirq(g_avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUT_XON),
                            on_uart_xon, NULL);
    avr_irq_register_notify(avr_io_getirq(g_avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUT_XOFF),
                            on_uart_xoff, NULL);

    /* The pins (Arduino UNO: D10 = PB2, D11 = PB3, D3 = PD3, D4 = PD4). Idle lines are high. */
    avr_irq_register_notify(avr_io_getirq(g_avr, AVR_IOCTL_IOPORT_GETIRQ('B'), IOPORT_IRQ_PIN3),
                            on_tx_pin, NULL);
    g_rx_pin = avr_io_getirq(g_avr, AVR_IOCTL_IOPORT_GETIRQ('B'), IOPORT_IRQ_PIN2);
    avr_raise_irq(g_rx_pin, 1);
    avr_raise_irq(avr_io_getirq(g_avr, AVR_IOCTL_IOPORT_GETIRQ('D'), IOPORT_IRQ_PIN3), 1);
    avr_irq_register_notify(avr_io_getirq(g_avr, AVR_IOCTL_IOPORT_GETIRQ('D'), IOPORT_IRQ_PIN4),
                            on_reset_pin, NULL);

    avr_cycle_timer_register(g_avr, POLL_CYCLES, service, NULL);
    clock_gettime(CLOCK_MONOTONIC, &g_wall_start);
    fprintf(announce, "port: %s\n", host_path);
    if (clock_lines) {
        fprintf(announce, "busy 0\n");
        fflush(announce);
        g_clock_out = announce;
    } else {
        fclose(announce);
    }

    int state = cpu_Running;
    while (!g_stop && state != cpu_Done && state != cpu_Crashed)
        state = avr_run(g_avr);

    report_counts();
    if (state == cpu_Crashed) {
        fputs("uno-simavr: the AVR crashed\n", stderr);
        return 1;
    }
    return 0;
}
