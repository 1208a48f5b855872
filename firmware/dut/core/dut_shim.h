/* The portable core of the neurobench-rig DUT shim: an MLPerf Tiny (EEMBC ULPMark-ML)
 * compatible command interpreter plus the rig's negotiated extensions (caps, bload).
 *
 * Protocol: protocols/dut/SPEC.md. The core owns the command buffer, the input buffer, the
 * warm-up and inference loop and all reply formatting; it talks to the target only through
 * dut_port.h and to the model only through asc_model.h.
 *
 * Use: call dut_init() once at boot (it prints the boot banner), then hand every received byte
 * to dut_rx_char(). A command runs to completion inside dut_rx_char() when its '%' arrives.
 */
#ifndef NEUROBENCH_DUT_SHIM_H
#define NEUROBENCH_DUT_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Characters of one command kept before its '%'; the rest is silently dropped, as on the
 * reference firmware. */
#define DUT_COMMAND_CAPACITY 80
/* Bytes the input buffer holds (db load and bload fill it). */
#define DUT_INPUT_CAPACITY 32768u
/* Defaults of `infer` when N or W is left out (the reference firmware's). */
#define DUT_DEFAULT_ITERATIONS 1
#define DUT_DEFAULT_WARMUP 10
/* Inter-byte timeout of a binary download. */
#define DUT_BLOAD_BYTE_TIMEOUT_MS 1000u
/* What m-name-<name>-[...] reports. */
#define DUT_NAME "dut"
#define DUT_PROFILE "ULPMark for tinyML Firmware V0.0.1"
/* Capability words answered to `caps` (comma separated). lapcrc: once `caps` was asked, lap
 * lines end with their CRC-32 as result lines do (rcrc), and `laps` prints the last infer's
 * two lap lines again. */
#define DUT_CAPABILITIES "bload,dbcrc,rcrc,lapcrc"
/* Added to them in energy mode: `infer` also prints its lap counter at both timestamp pulses
 * (m-lap-us lines after the window has closed), so the DUT's timer and the energy monitor time
 * the same window. */
#define DUT_CAP_ELAP "elap"

/* The timestamp mode the firmware is built for (a real board supports exactly one). */
typedef enum {
    DUT_MODE_PERFORMANCE = 0, /* timestamps are m-lap-us-<n> lines */
    DUT_MODE_ENERGY = 1       /* timestamps are falling edges on the timestamp GPIO */
} dut_timestamp_mode;

typedef struct {
    dut_timestamp_mode mode;
    /* Shown in m-name-dut-[<vendor>]; NULL means "unspecified". */
    const char *vendor;
} dut_config;

/* Reset all state (as after power-on) and print the boot banner. `cfg` is copied. */
void dut_init(const dut_config *cfg);

/* Feed one received byte. '%' ends a command, which then runs and is answered, m-ready last. */
void dut_rx_char(char c);

#ifdef __cplusplus
}
#endif

#endif
