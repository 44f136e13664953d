.globl arch_placeholder
arch_placeholder: ret
.section .note.GNU-stack,"",@progbits
