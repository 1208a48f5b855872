/*
 * neurobench-rig IO manager: an Arduino UNO between the host and a DUT measured in energy mode.
 *
 * The host talks to the UNO over USB serial (115200 baud); the UNO talks to the DUT's UART at
 * 9600 baud through level shifters, so that the DUT's UART is never tied to the host's USB
 * ground and supply while the energy monitor measures the DUT. Wire format
 * (protocols/io_manager): commands are ASCII ending in '%', replies are "\r\n" lines, and each
 * of the UNO's own commands ends with "m-ready".
 *
 *   dut <cmd>%     forward "<cmd>%" to the DUT, then "m-dut-passthrough(<cmd>)" + "m-ready";
 *                  every line the DUT prints is relayed as "[dut]: <line>"
 *   name%          m-name-[neurobench-rig IO manager]
 *   version%       m-version-[1.0.0]
 *   help%          one m-help-[...] line per command
 *   res <0|1>%     m-res-<0|1>: the level of the DUT reset line that holds the DUT in reset
 *   enable-timer%  m-timer-enabled: print m-lap-us-<micros> for each timestamp edge
 *   disable-timer% m-timer-disabled
 *   tm <0|1>%      m-tm-<0|1>: timer edges 0 = falling only, 1 = every change
 *   other          e-[Unknown command: <text>]
 *
 * See README.md next to this file for the wiring and the limits.
 */
#include <Arduino.h>
#include <SoftwareSerial.h>
#include <stdint.h>
#include <string.h>

// -- wiring (the UNO's 5 V side of the level shifters) ---------------------------------------
static const uint8_t PIN_DUT_RX = 10;    // UNO receives: DUT TX
static const uint8_t PIN_DUT_TX = 11;    // UNO transmits: DUT RX
static const uint8_t PIN_TIMESTAMP = 3;  // DUT timestamp GPIO (INT1)
static const uint8_t PIN_DUT_RESET = 4;  // DUT reset line

static const unsigned long HOST_BAUD = 115200UL;
static const unsigned long DUT_BAUD = 9600UL;

// The command buffer, '%' included: at most 79 characters of text. A longer command is refused
// whole rather than truncated, so that a cut "dut db ..." never reaches the DUT.
static const uint8_t CMD_SIZE = 80;
// A longer DUT line is relayed in pieces of this size, each with its own prefix.
static const uint8_t DUT_LINE_SIZE = 128;
// Timestamp edge slots (a power of two for the ring index); one stays free to tell full from
// empty, so seven captures wait to be printed.
static const uint8_t LAP_SLOTS = 8;

static const char FW_NAME[] = "neurobench-rig IO manager";
static const char FW_VERSION[] = "1.0.0";

static SoftwareSerial dut(PIN_DUT_RX, PIN_DUT_TX);

static char cmd[CMD_SIZE];
static uint8_t cmd_len = 0;
static bool cmd_overflow = false;

static char dut_line[DUT_LINE_SIZE + 1];
static uint8_t dut_len = 0;

static bool timer_enabled = false;
static uint8_t edge_mode = 0;

// Written by the edge interrupt, read by loop(): a single-producer ring of micros() values.
static volatile unsigned long laps[LAP_SLOTS];
static volatile uint8_t lap_head = 0;
static volatile uint8_t lap_tail = 0;
static volatile uint8_t laps_lost = 0;

// -- output -----------------------------------------------------------------------------------
static void end_line() { Serial.print(F("\r\n")); }

static void say(const __FlashStringHelper *line) {
  Serial.print(line);
  end_line();
}

static void ready() { say(F("m-ready")); }

// -- timer ------------------------------------------------------------------------------------
static void on_timestamp_edge() {
  // micros() first: everything after it is latency that the capture must not include.
  unsigned long now = micros();
  uint8_t next = (uint8_t)((lap_head + 1) & (LAP_SLOTS - 1));
  if (next == lap_tail) {
    if (laps_lost < 255) laps_lost++;
    return;
  }
  laps[lap_head] = now;
  lap_head = next;
}

static void arm_timer() {
  detachInterrupt(digitalPinToInterrupt(PIN_TIMESTAMP));
  if (timer_enabled) {
    attachInterrupt(digitalPinToInterrupt(PIN_TIMESTAMP), on_timestamp_edge,
                    edge_mode ? CHANGE : FALLING);
  }
}

static void report_laps() {
  for (;;) {
    noInterrupts();
    if (lap_tail == lap_head) {
      interrupts();
      break;
    }
    unsigned long t = laps[lap_tail];
    lap_tail = (uint8_t)((lap_tail + 1) & (LAP_SLOTS - 1));
    interrupts();
    Serial.print(F("m-lap-us-"));
    Serial.print(t);
    end_line();
  }
  noInterrupts();
  uint8_t lost = laps_lost;
  laps_lost = 0;
  interrupts();
  if (lost) {
    Serial.print(F("m-lap-lost-"));
    Serial.print((unsigned long)lost);
    end_line();
  }
}

// -- reset line -------------------------------------------------------------------------------
static void set_reset_polarity(uint8_t level) {
  // Set the output latch before switching to output, so the line goes straight to the
  // released (inactive) level and never glitches into a reset.
  digitalWrite(PIN_DUT_RESET, level ? LOW : HIGH);
  pinMode(PIN_DUT_RESET, OUTPUT);
}

// -- commands ---------------------------------------------------------------------------------
static char *trim(char *text) {
  while (*text == ' ') text++;
  size_t n = strlen(text);
  while (n > 0 && text[n - 1] == ' ') text[--n] = '\0';
  return text;
}

// The argument of "<word> <arg>", "" for a bare "<word>", NULL if text is another command.
static char *argument_of(char *text, const char *word) {
  size_t n = strlen(word);
  if (strncmp(text, word, n) != 0) return NULL;
  if (text[n] == '\0') return text + n;
  if (text[n] != ' ') return NULL;
  return trim(text + n);
}

// 0 or 1 for exactly "0" or "1", else -1.
static int parse_bit(const char *arg) {
  if ((arg[0] == '0' || arg[0] == '1') && arg[1] == '\0') return arg[0] - '0';
  return -1;
}

static void passthrough(const char *command) {
  // Forward first, acknowledge second: SoftwareSerial blocks interrupts while it transmits,
  // so host bytes arriving meanwhile would be lost; the host sends nothing before the ack.
  dut.print(command);
  dut.print('%');
  Serial.print(F("m-dut-passthrough("));
  Serial.print(command);
  Serial.print(')');
  end_line();
  ready();
}

static void help() {
  say(F("m-help-[name: this board's name]"));
  say(F("m-help-[version: firmware version]"));
  say(F("m-help-[dut <cmd>: pass <cmd>% through to the DUT]"));
  say(F("m-help-[res <0|1>: DUT reset line level that holds the DUT in reset]"));
  say(F("m-help-[enable-timer: print m-lap-us-<us> for each timestamp edge]"));
  say(F("m-help-[disable-timer: stop printing timestamp edges]"));
  say(F("m-help-[tm <0|1>: timer edges 0=falling 1=any change]"));
  say(F("m-help-[help: this list]"));
}

static void execute(char *text) {
  text = trim(text);
  char *arg;
  if ((arg = argument_of(text, "dut")) != NULL) {
    if (*arg == '\0') {
      say(F("e-[dut needs a command]"));
    } else {
      passthrough(arg);
      return;  // passthrough() said m-ready
    }
  } else if (strcmp(text, "name") == 0) {
    Serial.print(F("m-name-["));
    Serial.print(FW_NAME);
    Serial.print(']');
    end_line();
  } else if (strcmp(text, "version") == 0) {
    Serial.print(F("m-version-["));
    Serial.print(FW_VERSION);
    Serial.print(']');
    end_line();
  } else if (strcmp(text, "help") == 0) {
    help();
  } else if ((arg = argument_of(text, "res")) != NULL) {
    int level = parse_bit(arg);
    if (level < 0) {
      say(F("e-[res needs 0 or 1]"));
    } else {
      set_reset_polarity((uint8_t)level);
      say(level ? F("m-res-1") : F("m-res-0"));
    }
  } else if ((arg = argument_of(text, "tm")) != NULL) {
    int mode = parse_bit(arg);
    if (mode < 0) {
      say(F("e-[tm needs 0 or 1]"));
    } else {
      edge_mode = (uint8_t)mode;
      arm_timer();
      say(mode ? F("m-tm-1") : F("m-tm-0"));
    }
  } else if (strcmp(text, "enable-timer") == 0) {
    timer_enabled = true;
    arm_timer();
    say(F("m-timer-enabled"));
  } else if (strcmp(text, "disable-timer") == 0) {
    timer_enabled = false;
    arm_timer();
    say(F("m-timer-disabled"));
  } else {
    Serial.print(F("e-[Unknown command: "));
    Serial.print(text);
    Serial.print(']');
    end_line();
  }
  ready();
}

// -- the two streams --------------------------------------------------------------------------
static void poll_host() {
  while (Serial.available() > 0) {
    char c = (char)Serial.read();
    if (c == '%') {
      cmd[cmd_len] = '\0';
      if (cmd_overflow) {
        say(F("e-[Command too long: more than 80 characters]"));
        ready();
      } else {
        execute(cmd);
      }
      cmd_len = 0;
      cmd_overflow = false;
    } else if (c == '\r' || c == '\n') {
      // A terminal's line ending carries no meaning: '%' ends a command.
    } else if (cmd_len < CMD_SIZE - 1) {
      cmd[cmd_len++] = c;
    } else {
      cmd_overflow = true;
    }
  }
}

static void relay_line() {
  if (dut_len == 0) return;
  dut_line[dut_len] = '\0';
  Serial.print(F("[dut]: "));
  Serial.print(dut_line);
  end_line();
  dut_len = 0;
}

static void poll_dut() {
  // Whole lines only: a reply of the UNO's own never lands inside a relayed DUT line.
  while (dut.available() > 0) {
    char c = (char)dut.read();
    if (c == '\r') continue;
    if (c == '\n') {
      relay_line();
      continue;
    }
    dut_line[dut_len++] = c;
    if (dut_len >= DUT_LINE_SIZE) relay_line();
  }
}

void setup() {
  Serial.begin(HOST_BAUD);
  dut.begin(DUT_BAUD);
  dut.listen();
  pinMode(PIN_TIMESTAMP, INPUT);  // driven by the DUT through the level shifter
  pinMode(PIN_DUT_RESET, INPUT);  // left floating until `res` says which level is reset
}

void loop() {
  poll_host();
  poll_dut();
  report_laps();
}
