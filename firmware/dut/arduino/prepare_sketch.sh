#!/bin/sh
# Assemble a buildable Arduino sketch folder (the Arduino tools compile only the sketch folder):
# the sketch and its port from neurobench_dut/, plus the portable core and the model from
# ../core. Usage: prepare_sketch.sh [OUT_DIR]   (default: <repo>/build/arduino)
# Prints the sketch folder, e.g. for: arduino-cli compile --fqbn arduino:mbed_nano:nano33ble DIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../../build/arduino}
sketch="$out/neurobench_dut"
mkdir -p "$sketch"
# Copies, not links: the Arduino IDE and some OSes do not follow symlinks in a sketch folder.
cp "$here/neurobench_dut/neurobench_dut.ino" "$here/neurobench_dut/port_arduino.cpp" "$sketch/"
cp "$here/../core/"*.c "$here/../core/"*.h "$sketch/"
cd "$sketch" && pwd
