/* The dut_port.h layer for QEMU's mps2-an386 (Cortex-M4): CMSDK UART0 polled for bytes, a
 * 32-bit microsecond counter built on SysTick, WFI while waiting so an idle board costs the
 * emulator (and a real board) nothing. Performance timestamp mode only: the board has no
 * timestamp line wired to an energy monitor. */
#include <stdint.h>

#include "dut_port.h"
#include "mps2_an386.h"

/* SysTick counts the 25 MHz core clock; it wraps (and interrupts) every 10 ms, so a WFI never
 * sleeps past a read timeout by more than that. */
#define TICKS_PER_US (MPS2_SYSCLK_HZ / 1000000u)
#define SYSTICK_PERIOD_US 10000u
#define SYSTICK_RELOAD (SYSTICK_PERIOD_US * TICKS_PER_US - 1u)
/* 115200 baud from the 25 MHz APB clock (QEMU's UART does not pace bytes, a board's does). */
#define UART_BAUD 115200u

/* Where the microsecond counter starts at power-on. 0 on a real build; the lap-counter wrap
 * test builds with -DPORT_TIMER_START_US=<just below 2^32> (a separate ELF, never the
 * benchmark firmware) to see the counter wrap within seconds. */
#ifndef PORT_TIMER_START_US
#define PORT_TIMER_START_US 0u
#endif

/* Whole SysTick periods since power-on, advanced by the SysTick interrupt. */
static volatile uint32_t g_periods;

void port_mps2_systick_isr(void)
{
    g_periods++;
}

/* UART0 RX: the interrupt only wakes the core from WFI; port_read_byte() reads the byte. */
void port_mps2_uart0_rx_isr(void)
{
    UART0_INTSTATUS = UART_INT_RX;
}

void port_mps2_begin(void)
{
    UART0_BAUDDIV = MPS2_SYSCLK_HZ / UART_BAUD;
    UART0_CTRL = UART_CTRL_TX_EN | UART_CTRL_RX_EN | UART_CTRL_RX_INT_EN;
    NVIC_ISER0 = 1u << UART0_RX_IRQ;
    SYST_RVR = SYSTICK_RELOAD;
    SYST_CVR = 0u;
    SYST_CSR = SYST_CSR_ENABLE | SYST_CSR_TICKINT | SYST_CSR_CLKSOURCE_CPU;
}

uint32_t port_timer_us(void)
{
    uint32_t periods;
    uint32_t count;
    /* A period that ends between the two reads is seen by reading again. */
    do {
        periods = g_periods;
        count = SYST_CVR;
    } while (periods != g_periods);
    /* Unsigned arithmetic: the counter wraps at 2^32 like a board's micros(). */
    return (uint32_t)PORT_TIMER_START_US + periods * SYSTICK_PERIOD_US
           + (SYSTICK_RELOAD - count) / TICKS_PER_US;
}

int port_read_byte(uint32_t timeout_ms)
{
    const uint32_t start = port_timer_us();
    for (;;) {
        int expired;
        if (UART0_STATE & UART_STATE_RX_FULL) {
            return (int)(UART0_DATA & 0xFFu);
        }
        expired = (uint32_t)(port_timer_us() - start) >= timeout_ms * 1000u;
        if (expired) {
            return PORT_TIMEOUT;
        }
        /* Masked, a byte that arrives between the check and WFI still wakes it (pending). */
        __asm volatile("cpsid i" ::: "memory");
        if (!(UART0_STATE & UART_STATE_RX_FULL)) {
            __asm volatile("wfi" ::: "memory");
        }
        __asm volatile("cpsie i" ::: "memory");
    }
}

void port_write(const char *s, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        while (UART0_STATE & UART_STATE_TX_FULL) {
        }
        UART0_DATA = (uint8_t)s[i];
    }
}

/* port_write() hands every byte to the UART itself: nothing is queued here. */
void port_flush_output(void)
{
}

/* Never called: a performance-mode build (dut_port.h). */
void port_timestamp(void)
{
}

/* Real time passes by itself on a board (emulated: by instruction count under -icount). */
void port_compute_begin(void)
{
}

void port_inference_done(void)
{
}

void port_compute_end(void)
{
}
