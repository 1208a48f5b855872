/* dut-host: the DUT shim as a Linux program.
 *
 *   dut-host [--mode energy|performance] [--pty]
 *
 * The UART is stdin/stdout (raw bytes), or with --pty a new pty whose path is printed on stderr.
 * With RIG_SIMBUS_FD set it runs on the virtual bench's simulated clock (firmware/dut/README.md).
 * It prints the boot banner at once and serves commands until its input ends or SIGTERM. */
#include <stdio.h>
#include <string.h>

#include "dut_port.h"
#include "dut_shim.h"
#include "port_host.h"

/* How long one poll of the UART waits: only bounds how often the loop comes round. */
#define IDLE_POLL_MS 1000u

static const char USAGE[] = "usage: dut-host [--mode energy|performance] [--pty]\n";

int main(int argc, char **argv)
{
    dut_config cfg;
    char err[256];
    int use_pty = 0;
    int i;

    cfg.mode = DUT_MODE_PERFORMANCE;
    cfg.vendor = "neurobench-rig host shim";
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            const char *mode = argv[++i];
            if (strcmp(mode, "energy") == 0) {
                cfg.mode = DUT_MODE_ENERGY;
            } else if (strcmp(mode, "performance") == 0) {
                cfg.mode = DUT_MODE_PERFORMANCE;
            } else {
                fprintf(stderr, "dut-host: unknown timestamp mode '%s'\n%s", mode, USAGE);
                return PORT_HOST_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--pty") == 0) {
            use_pty = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(USAGE, stdout);
            return 0;
        } else {
            fprintf(stderr, "dut-host: unexpected argument '%s'\n%s", argv[i], USAGE);
            return PORT_HOST_EXIT_USAGE;
        }
    }

    port_host_install_signals();
    if (port_host_join_simbus(err, sizeof err) < 0 ||
        port_host_open_uart(use_pty, err, sizeof err) < 0) {
        fprintf(stderr, "dut-host: %s\n", err);
        return PORT_HOST_EXIT_USAGE;
    }

    dut_init(&cfg);
    for (;;) {
        int c = port_read_byte(IDLE_POLL_MS);
        if (c == PORT_CLOSED) {
            break;
        }
        if (c >= 0) {
            dut_rx_char((char)c);
        }
    }
    port_flush_output();
    return 0;
}
