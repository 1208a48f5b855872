/* A minimal stand-in for the Arduino core's Arduino.h: declarations only, enough for
 * `g++ -fsyntax-only` to check the DUT shim's Arduino sketch and port (nothing links or runs).
 * It follows ArduinoCore-API's names and signatures for what the sketch uses. */
#ifndef NEUROBENCH_ARDUINO_STUB_H
#define NEUROBENCH_ARDUINO_STUB_H

#include <stddef.h>
#include <stdint.h>

#define HIGH 0x1
#define LOW 0x0
#define INPUT 0x0
#define OUTPUT 0x1

void pinMode(int pin, int mode);
void digitalWrite(int pin, int value);
int digitalRead(int pin);
unsigned long millis(void);
unsigned long micros(void);
void delay(unsigned long ms);
void delayMicroseconds(unsigned int us);

class Print {
public:
    virtual ~Print() {}
    virtual size_t write(uint8_t c) = 0;
    virtual size_t write(const uint8_t *buffer, size_t size);
    size_t write(const char *str);
    virtual void flush() {}
};

class Stream : public Print {
public:
    virtual int available() = 0;
    virtual int read() = 0;
    virtual int peek() = 0;
};

class HardwareSerial : public Stream {
public:
    virtual void begin(unsigned long baud) = 0;
    virtual void end() = 0;
    virtual int available() = 0;
    virtual int peek() = 0;
    virtual int read() = 0;
    virtual void flush() = 0;
    virtual size_t write(uint8_t c) = 0;
    using Print::write;
    virtual operator bool() = 0;
};

/* USB serial and the hardware UART on D0/D1 (Nano 33 BLE naming). */
extern HardwareSerial &Serial;
extern HardwareSerial &Serial1;

#endif
