// A minimal stand-in for the Arduino SoftwareSerial library (see Arduino.h next to this file).
#ifndef UNO_STUB_SOFTWARESERIAL_H
#define UNO_STUB_SOFTWARESERIAL_H

#include "Arduino.h"

class SoftwareSerial : public Print {
 public:
  SoftwareSerial(uint8_t rx_pin, uint8_t tx_pin, bool inverse_logic = false);
  void begin(long speed);
  bool listen();
  int available();
  int read();
  size_t write(uint8_t byte) override;
};

#endif
