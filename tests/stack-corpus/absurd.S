/* absurd.S - stack-corpus: frame sizes at the edges of the arithmetic.
 * `enter` takes an unsigned 16-bit size; frames of 1 GiB and more are no
 * real frames and must be flagged unknown, never wrapped to a small one. */
.intel_syntax noprefix
.text
.globl ab_enter, ab_sub, ab_sub2, ab_huge, main
.type ab_enter,@function
ab_enter: enter 0x9000, 0
 leave
 ret
.size ab_enter,.-ab_enter
.type ab_sub,@function
ab_sub: sub rsp, 0x7fffffff
 add rsp, 0x7fffffff
 ret
.size ab_sub,.-ab_sub
.type ab_sub2,@function
ab_sub2: sub rsp, 0x40000000
 sub rsp, 0x40000000
 mov byte ptr [rsp], 0
 add rsp, 0x7fffffff
 add rsp, 1
 ret
.size ab_sub2,.-ab_sub2
.type ab_huge,@function
ab_huge: movabs r11, 0xffffffff00000000
 add rsp, r11
 mov byte ptr [rsp], 0
 sub rsp, r11
 ret
.size ab_huge,.-ab_huge
.type main,@function
main: xor eax, eax
 ret
.size main,.-main
.section .note.GNU-stack,"",@progbits
