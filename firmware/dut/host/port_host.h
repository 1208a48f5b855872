/* The Linux host port of the DUT shim (implements ../core/dut_port.h): UART on file descriptors
 * (stdin/stdout or a pty of its own), and either the virtual bench's sim bus or the real clock. */
#ifndef NEUROBENCH_PORT_HOST_H
#define NEUROBENCH_PORT_HOST_H

#include <stddef.h>

/* Exit status when the shim cannot start (bad arguments, bad environment). */
#define PORT_HOST_EXIT_USAGE 2
/* Exit status when the sim bus fails mid-run (the bench went away or spoke nonsense). */
#define PORT_HOST_EXIT_BUS 3

/* UART = stdin/stdout, or (use_pty) a new raw pty whose slave path is printed on stderr as
 * "port: <path>". Returns 0, or -1 with a message in `err`. */
int port_host_open_uart(int use_pty, char *err, size_t err_size);

/* Join the sim bus if RIG_SIMBUS_FD is set (RIG_SIM_INFERENCE_NS and RIG_SIM_POWER_ON_NS are then
 * required). Returns 1 on the bus, 0 standalone, -1 with a message in `err`. */
int port_host_join_simbus(char *err, size_t err_size);

/* SIGTERM/SIGINT end the process at once (a power cut); SIGPIPE is ignored. */
void port_host_install_signals(void);

#endif
