/* The port layer: everything the portable DUT core needs from a target.
 *
 * A port implements these functions once per target (firmware/dut/arduino/, firmware/dut/host/).
 * The core calls them from one thread only; none is called from an interrupt.
 *
 * Time model. The core brackets every piece of work whose timing matters (an `infer`, a
 * `timestamp`) between port_compute_begin() and port_compute_end(), and calls
 * port_inference_done() after each inference it computed. A port on real hardware makes these
 * no-ops: time passes by itself. The host port on the virtual bench's sim bus keeps a local
 * simulated time instead: begin asks the bench for "now", each inference advances it by the
 * simulated inference time, and port_flush_output() holds the output back until the bench's
 * clock has reached the local time (see firmware/dut/README.md).
 */
#ifndef NEUROBENCH_DUT_PORT_H
#define NEUROBENCH_DUT_PORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* port_read_byte() results that are not a byte. */
#define PORT_TIMEOUT (-1) /* nothing arrived within the timeout */
#define PORT_CLOSED (-2)  /* the UART is gone for good (host build: end of input) */

/* The next received byte (0..255), waiting at most `timeout_ms` for it (0: do not wait). */
int port_read_byte(uint32_t timeout_ms);

/* Queue `n` bytes for the UART. A port may buffer them until port_flush_output(). */
void port_write(const char *s, size_t n);

/* Send everything queued by port_write(). The core calls it at the end of every reply and
 * right before a timed window opens, so that no UART traffic falls inside the window; a port
 * that buffers must not hold output back across this call. */
void port_flush_output(void);

/* The DUT's free-running 32-bit microsecond counter (wraps), counting from power-on. Printed
 * as m-lap-us-<n> in performance mode. */
uint32_t port_timer_us(void);

/* Energy mode only: a falling edge on the timestamp GPIO now, held low a few microseconds,
 * then high again. The energy monitor records it. Never called in performance mode. */
void port_timestamp(void);

/* Timed work starts now (the local time reference is taken here). */
void port_compute_begin(void);

/* One inference has just been computed (it took the DUT's inference time). */
void port_inference_done(void);

/* Timed work is over: the DUT is idle from now on. Called after the work's output was flushed. */
void port_compute_end(void);

#ifdef __cplusplus
}
#endif

#endif
