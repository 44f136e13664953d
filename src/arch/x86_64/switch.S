/*
 * switch.S - x86-64 SysV context switch for mote tasks.
 *
 * mote__arch_switch(from, to): pushes rbp, rbx, r12-r15 and an 8-byte slot holding
 * MXCSR (low half) and the x87 control word (high half), saves rsp in
 * from->sp, loads to->sp and restores the same set in reverse.  Saving the
 * floating-point control state keeps a task's rounding mode and exception
 * masks its own even when another task on the same thread changes them.
 *
 * mote__arch_jump(to): the second half alone - loads to->sp and restores;
 * an exiting task leaves with it, so nothing of the exit lands on its
 * stack below the frames it used (the runtime measures that depth).
 *
 * mote__arch_task_trampoline: first "return address" of a new context.  It calls
 * r12(r13) with a 16-byte aligned stack; rip is marked undefined in the CFI so
 * debuggers and unwinders stop here instead of walking into garbage.
 */
    .text
    .globl  mote__arch_switch
    .hidden mote__arch_switch
    .type   mote__arch_switch, @function
    .p2align 4
mote__arch_switch:
    .cfi_startproc
    pushq   %rbp
    pushq   %rbx
    pushq   %r12
    pushq   %r13
    pushq   %r14
    pushq   %r15
    subq    $8, %rsp
    stmxcsr (%rsp)
    fnstcw  4(%rsp)
    movq    %rsp, (%rdi)
    movq    %rsi, %rdi
    /* falls through: the restoring half is mote__arch_jump's */
    .cfi_endproc
    .size   mote__arch_switch, .-mote__arch_switch

    .globl  mote__arch_jump
    .hidden mote__arch_jump
    .type   mote__arch_jump, @function
mote__arch_jump:
    .cfi_startproc
    movq    (%rdi), %rsp
    ldmxcsr (%rsp)
    fldcw   4(%rsp)
    addq    $8, %rsp
    popq    %r15
    popq    %r14
    popq    %r13
    popq    %r12
    popq    %rbx
    popq    %rbp
    ret
    .cfi_endproc
    .size   mote__arch_jump, .-mote__arch_jump

    .globl  mote__arch_task_trampoline
    .hidden mote__arch_task_trampoline
    .type   mote__arch_task_trampoline, @function
    .p2align 4
mote__arch_task_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    movq    %r13, %rdi
    callq   *%r12
    ud2
    .cfi_endproc
    .size   mote__arch_task_trampoline, .-mote__arch_task_trampoline

    .section .note.GNU-stack,"",@progbits
