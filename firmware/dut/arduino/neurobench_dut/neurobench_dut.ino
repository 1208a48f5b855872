/* neurobench-rig DUT shim for the Arduino Nano 33 BLE: MLPerf Tiny compatible benchmark firmware
 * running the asc01 model. Build it from the folder made by ../prepare_sketch.sh, which adds the
 * portable core and the model next to this file (see firmware/dut/README.md). */
#include <Arduino.h>

#include "dut_port.h"
#include "dut_shim.h"

/* The timestamp mode this firmware is built for: 1 = energy (GPIO timestamps, UART to the IO
 * manager at 9600 baud), 0 = performance (m-lap-us lines, USB serial at 115200 baud). */
#ifndef DUT_ENERGY_MODE
#define DUT_ENERGY_MODE 0
#endif

/* port_arduino.cpp */
void port_arduino_begin(bool energy_mode);

void setup()
{
    dut_config cfg;
    cfg.mode = DUT_ENERGY_MODE ? DUT_MODE_ENERGY : DUT_MODE_PERFORMANCE;
    cfg.vendor = "neurobench-rig Nano 33 BLE";
    port_arduino_begin(DUT_ENERGY_MODE != 0);
    dut_init(&cfg);
}

void loop()
{
    int c = port_read_byte(0);
    if (c >= 0) {
        dut_rx_char(static_cast<char>(c));
    }
}
