/* The DUT shim on QEMU's mps2-an386 (Cortex-M4): performance timestamp mode, UART0 at 115200.
 * Boots, prints the banner (lost unless the host's port was already open, as on a board) and
 * serves commands forever. */
#include "dut_port.h"
#include "dut_shim.h"

void port_mps2_begin(void);

/* How long one wait for a byte lasts: only bounds how often the loop comes round. */
#define IDLE_POLL_MS 1000u

int main(void)
{
    dut_config cfg;
    cfg.mode = DUT_MODE_PERFORMANCE;
    cfg.vendor = "neurobench-rig mps2-an386 Cortex-M4";
    port_mps2_begin();
    dut_init(&cfg);
    for (;;) {
        int c = port_read_byte(IDLE_POLL_MS);
        if (c >= 0) {
            dut_rx_char((char)c);
        }
    }
}
