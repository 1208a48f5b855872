// A minimal stand-in for the Arduino UNO core, enough to compile firmware/io_manager on a host:
// with -fsyntax-only for a syntax check, or linked with uno_host.cpp to run the sketch against
// scripted host and DUT bytes. Declares only what the sketch uses, with the real signatures.
#ifndef UNO_STUB_ARDUINO_H
#define UNO_STUB_ARDUINO_H

#include <stddef.h>
#include <stdint.h>

#define LOW 0
#define HIGH 1
#define INPUT 0
#define OUTPUT 1
#define CHANGE 1
#define FALLING 2
#define RISING 3
#define DEC 10

// On AVR, F() puts a literal in flash; on the host it is a plain pointer with a distinct type.
class __FlashStringHelper;
#define F(literal) (reinterpret_cast<const __FlashStringHelper *>(literal))

class Print {
 public:
  virtual ~Print() {}
  virtual size_t write(uint8_t byte) = 0;
  size_t print(const char *text);
  size_t print(const __FlashStringHelper *text);
  size_t print(char c);
  size_t print(unsigned long value, int base = DEC);
};

class HardwareSerial : public Print {
 public:
  void begin(unsigned long baud);
  int available();
  int read();
  size_t write(uint8_t byte) override;
};

extern HardwareSerial Serial;

void pinMode(uint8_t pin, uint8_t mode);
void digitalWrite(uint8_t pin, uint8_t value);
unsigned long micros();
void attachInterrupt(uint8_t interrupt, void (*isr)(void), int mode);
void detachInterrupt(uint8_t interrupt);
void noInterrupts();
void interrupts();
#define digitalPinToInterrupt(pin) ((pin) == 2 ? 0 : ((pin) == 3 ? 1 : -1))

void setup();
void loop();

#endif
