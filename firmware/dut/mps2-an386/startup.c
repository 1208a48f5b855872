/* Reset and vector table of the mps2-an386 port: copy .data from flash, clear .bss, turn the FPU
 * on, run main(). The linker script (mps2-an386.ld) places the table at address 0. */
#include <stdint.h>
#include <string.h>

#include "mps2_an386.h"

extern uint32_t __data_load__, __data_start__, __data_end__, __bss_start__, __bss_end__;
extern uint32_t __stack_top__;

int main(void);
void port_mps2_systick_isr(void);
void port_mps2_uart0_rx_isr(void);

/* Ends in a tight loop: a fault is a hang the rig sees as a missing reply, never silent data. */
static void default_handler(void)
{
    for (;;) {
    }
}

void Reset_Handler(void)
{
    const uint32_t *src = &__data_load__;
    uint32_t *dst;
    for (dst = &__data_start__; dst < &__data_end__;) {
        *dst++ = *src++;
    }
    for (dst = &__bss_start__; dst < &__bss_end__;) {
        *dst++ = 0u;
    }
    /* CP10 and CP11 full access: the build uses the Cortex-M4's single-precision FPU. */
    SCB_CPACR |= 0xFu << 20;
    __asm volatile("dsb\n isb" ::: "memory");
    (void)main();
    default_handler();
}

typedef void (*vector)(void);

/* 16 system exceptions, then the AN386's external interrupts (UART0 RX is the first). */
__attribute__((section(".vectors"), used)) static const vector vectors[16 + 32] = {
    (vector)(uintptr_t)&__stack_top__,
    Reset_Handler,
    default_handler, /* NMI */
    default_handler, /* HardFault */
    default_handler, /* MemManage */
    default_handler, /* BusFault */
    default_handler, /* UsageFault */
    0, 0, 0, 0,
    default_handler, /* SVCall */
    default_handler, /* DebugMonitor */
    0,
    default_handler, /* PendSV */
    port_mps2_systick_isr,
    [16 + UART0_RX_IRQ] = port_mps2_uart0_rx_isr,
    [16 + UART0_RX_IRQ + 1 ... 16 + 31] = default_handler,
};
