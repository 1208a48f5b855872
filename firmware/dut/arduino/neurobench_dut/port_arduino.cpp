/* Arduino port of the DUT shim (../../core/dut_port.h), written for the Nano 33 BLE (mbed core)
 * and portable to any Arduino core whose Serial and Serial1 are HardwareSerial.
 *
 * UART: performance mode talks to the host over USB (Serial, 115200 baud); energy mode talks to
 * the IO manager over the hardware UART on pins D0/D1 (Serial1, 9600 baud), because in energy
 * mode the board is powered by the energy monitor, not by USB.
 * Time passes by itself here: the compute hooks are empty and the timer is micros(). */
#include <Arduino.h>

#include "dut_port.h"

/* The timestamp GPIO the energy monitor (through the IO manager) watches. */
static const int kTimestampPin = 7;
/* How long a timestamp holds the line low: long enough for a monitor sampling at 100 kHz to see
 * it, short against a timed window of seconds. */
static const unsigned kTimestampHoldUs = 10;
static const unsigned long kEnergyBaud = 9600;
static const unsigned long kPerformanceBaud = 115200;

static HardwareSerial *g_uart = &Serial;

/* Open the UART of the given mode and park the timestamp line high. Called from setup(). */
void port_arduino_begin(bool energy_mode)
{
    if (energy_mode) {
        g_uart = &Serial1;
        g_uart->begin(kEnergyBaud);
    } else {
        g_uart = &Serial;
        g_uart->begin(kPerformanceBaud);
    }
    pinMode(kTimestampPin, OUTPUT);
    digitalWrite(kTimestampPin, HIGH);
}

extern "C" {

int port_read_byte(uint32_t timeout_ms)
{
    const unsigned long t0 = millis();
    for (;;) {
        if (g_uart->available() > 0) {
            return g_uart->read() & 0xFF;
        }
        /* Unsigned difference: correct across the millis() wrap. */
        if ((unsigned long)(millis() - t0) >= timeout_ms) {
            return PORT_TIMEOUT;
        }
    }
}

void port_write(const char *s, size_t n)
{
    g_uart->write(reinterpret_cast<const uint8_t *>(s), n);
}

void port_flush_output(void)
{
    g_uart->flush(); /* waits until the last byte has left: no UART traffic in a timed window */
}

uint32_t port_timer_us(void)
{
    return static_cast<uint32_t>(micros());
}

void port_timestamp(void)
{
    digitalWrite(kTimestampPin, LOW);
    delayMicroseconds(kTimestampHoldUs);
    digitalWrite(kTimestampPin, HIGH);
}

void port_compute_begin(void) {}

void port_inference_done(void) {}

void port_compute_end(void) {}

} /* extern "C" */
