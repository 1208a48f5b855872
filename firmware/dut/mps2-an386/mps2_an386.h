/* The few registers of QEMU's mps2-an386 (Arm MPS2 FPGA image AN386, Cortex-M4) this port uses.
 * Addresses and bits: Arm's AN386 and CMSDK documentation, checked against QEMU 7.2. */
#ifndef NEUROBENCH_MPS2_AN386_H
#define NEUROBENCH_MPS2_AN386_H

#include <stdint.h>

#define REG32(addr) (*(volatile uint32_t *)(addr))

/* The main clock of the AN386 image, which clocks the core, SysTick and the APB UARTs. */
#define MPS2_SYSCLK_HZ 25000000u

/* CMSDK APB UART0: the board's first serial port (QEMU: -serial). */
#define UART0_BASE 0x40004000u
#define UART0_DATA REG32(UART0_BASE + 0x00u)
#define UART0_STATE REG32(UART0_BASE + 0x04u)
#define UART0_CTRL REG32(UART0_BASE + 0x08u)
#define UART0_INTSTATUS REG32(UART0_BASE + 0x0Cu)
#define UART0_BAUDDIV REG32(UART0_BASE + 0x10u)
#define UART_STATE_TX_FULL (1u << 0)
#define UART_STATE_RX_FULL (1u << 1)
#define UART_CTRL_TX_EN (1u << 0)
#define UART_CTRL_RX_EN (1u << 1)
#define UART_CTRL_RX_INT_EN (1u << 3)
#define UART_INT_RX (1u << 1)
/* UART0's receive interrupt is external interrupt 0 of the AN386's NVIC. */
#define UART0_RX_IRQ 0u

/* SysTick (Armv7-M system timer, 24-bit down counter). */
#define SYST_CSR REG32(0xE000E010u)
#define SYST_RVR REG32(0xE000E014u)
#define SYST_CVR REG32(0xE000E018u)
#define SYST_CSR_ENABLE (1u << 0)
#define SYST_CSR_TICKINT (1u << 1)
#define SYST_CSR_CLKSOURCE_CPU (1u << 2)

/* NVIC interrupt set-enable, and the FPU's coprocessor access control. */
#define NVIC_ISER0 REG32(0xE000E100u)
#define SCB_CPACR REG32(0xE000ED88u)

#endif
