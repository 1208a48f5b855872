// Runs an UNO sketch on the host against a script, for tests (see test_io_manager_sketch.py).
//
// Each argument is one step; after each step loop() runs until the sketch is idle.
//   host:<text>   bytes the host sends to the UNO
//   dut:<text>    a line the DUT prints on its own ("\r\n" appended)
//   fall:<us>     the timestamp pin falls at micros() == us
//   rise:<us>     the timestamp pin rises at micros() == us
//   burst:<n>     n falling edges at micros() == 1..n, before loop() can run
// stdout: exactly the bytes the UNO sends to the host.
// stderr: one line per event elsewhere: "to-dut <command>%" for each command the DUT receives,
// "pin <n> mode <m>", "pin <n> write <v>", "attach <int> <mode>", "detach <int>".
// The fake DUT answers every command <c>% with "m-echo-[<c>]" and "m-ready".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>

#include "Arduino.h"
#include "SoftwareSerial.h"

HardwareSerial Serial;

namespace {

std::string host_in;     // host -> UNO, not yet read by the sketch
std::string dut_in;      // DUT -> UNO, not yet read by the sketch
std::string dut_cmd;     // UNO -> DUT, the command being received by the fake DUT
unsigned long now_us = 0;
void (*isr_fn)(void) = nullptr;
int isr_mode = -1;

const int kLoopsPerStep = 50;

void run_until_idle() {
  for (int i = 0; i < kLoopsPerStep; i++) loop();
}

void fire(bool falling) {
  if (isr_fn == nullptr) return;
  bool wanted = isr_mode == CHANGE || (falling ? isr_mode == FALLING : isr_mode == RISING);
  if (wanted) isr_fn();
}

}  // namespace

size_t Print::print(const char *text) {
  size_t n = 0;
  while (text[n] != '\0') write(static_cast<uint8_t>(text[n++]));
  return n;
}

size_t Print::print(const __FlashStringHelper *text) {
  return print(reinterpret_cast<const char *>(text));
}

size_t Print::print(char c) { return write(static_cast<uint8_t>(c)); }

size_t Print::print(unsigned long value, int base) {
  char digits[40];
  snprintf(digits, sizeof digits, base == 16 ? "%lx" : "%lu", value);
  return print(static_cast<const char *>(digits));
}

void HardwareSerial::begin(unsigned long) {}

int HardwareSerial::available() { return static_cast<int>(host_in.size()); }

int HardwareSerial::read() {
  if (host_in.empty()) return -1;
  unsigned char c = static_cast<unsigned char>(host_in[0]);
  host_in.erase(0, 1);
  return c;
}

size_t HardwareSerial::write(uint8_t byte) {
  fputc(byte, stdout);
  return 1;
}

SoftwareSerial::SoftwareSerial(uint8_t, uint8_t, bool) {}

void SoftwareSerial::begin(long) {}

bool SoftwareSerial::listen() { return true; }

int SoftwareSerial::available() { return static_cast<int>(dut_in.size()); }

int SoftwareSerial::read() {
  if (dut_in.empty()) return -1;
  unsigned char c = static_cast<unsigned char>(dut_in[0]);
  dut_in.erase(0, 1);
  return c;
}

size_t SoftwareSerial::write(uint8_t byte) {
  dut_cmd.push_back(static_cast<char>(byte));
  if (byte == '%') {
    fprintf(stderr, "to-dut %s\n", dut_cmd.c_str());
    dut_cmd.pop_back();
    dut_in += "m-echo-[" + dut_cmd + "]\r\nm-ready\r\n";
    dut_cmd.clear();
  }
  return 1;
}

void pinMode(uint8_t pin, uint8_t mode) {
  fprintf(stderr, "pin %u mode %s\n", pin, mode == OUTPUT ? "output" : "input");
}

void digitalWrite(uint8_t pin, uint8_t value) { fprintf(stderr, "pin %u write %u\n", pin, value); }

unsigned long micros() { return now_us; }

void attachInterrupt(uint8_t interrupt, void (*isr)(void), int mode) {
  isr_fn = isr;
  isr_mode = mode;
  fprintf(stderr, "attach %u %s\n", interrupt, mode == CHANGE ? "change" : "falling");
}

void detachInterrupt(uint8_t interrupt) {
  isr_fn = nullptr;
  isr_mode = -1;
  fprintf(stderr, "detach %u\n", interrupt);
}

void noInterrupts() {}

void interrupts() {}

int main(int argc, char **argv) {
  setup();
  for (int k = 1; k < argc; k++) {
    std::string step(argv[k]);
    size_t colon = step.find(':');
    std::string kind = step.substr(0, colon);
    std::string arg = colon == std::string::npos ? "" : step.substr(colon + 1);
    if (kind == "host") {
      host_in += arg;
    } else if (kind == "dut") {
      dut_in += arg + "\r\n";
    } else if (kind == "fall" || kind == "rise") {
      now_us = strtoul(arg.c_str(), nullptr, 10);
      fire(kind == "fall");
    } else if (kind == "burst") {
      unsigned long n = strtoul(arg.c_str(), nullptr, 10);
      for (now_us = 1; now_us <= n; now_us++) fire(true);
    } else {
      fprintf(stderr, "unknown step %s\n", step.c_str());
      return 2;
    }
    run_until_idle();
  }
  fflush(stdout);
  return 0;
}
