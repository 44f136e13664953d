/*
 * frames.c - disassembly and frame analysis (see frames.h).
 *
 * Each function is followed instruction by instruction from its entry along
 * every branch (recursive descent), tracking what each general register
 * holds relative to the entry %rsp: a known stack address, a constant, a
 * stack address moved by an unknown amount (alloca), or nothing known.  The
 * frame is the deepest %rsp met anywhere, not the prologue's: shrink-wrapped
 * code sets its frame up after an early exit, and -O0 or clang can adjust
 * %rsp again in the body.
 *
 * Why a flow analysis and not a prologue pattern: stack-clash probe loops
 * (`sub rsp,4096; or [rsp],0; cmp rsp,r11; jne`) only give the right size if
 * the loop bound in r11 is known; `and rsp,-N` needs the alignment of %rsp
 * at that point; `%rdi` before a call to mote_go (the spawned function) is a
 * constant only along the flow (clang hoists the lea out of the loop).
 *
 * What recursive descent cannot reach (jump-table targets, exception landing
 * pads) is swept linearly afterwards and analysed from the depth of the
 * jump-table dispatch, else the function's deepest %rsp, with the frame
 * pointer as established: compilers keep %rsp constant across a function's
 * body, so this is exact for compiler output and flagged FR_GAPS.
 *
 * Loops that move %rsp by a fixed amount per trip and are no recognised
 * probe loop would make depths grow forever: an instruction is re-analysed
 * at most VISITS_MAX times with a deeper %rsp, then the function is marked
 * dynamic.
 */
#include "frames.h"

#include <capstone/capstone.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8, R9, R10, R11, RIP = 16 };
enum { VISITS_MAX = 4, TBL_AGE_MAX = 10, MAX_RANGES = 8 };
/* No real frame is this deep (a task stack is far smaller): a %rsp beyond
 * it is the analysis losing track (or hostile code), flagged unknown, and
 * it keeps every depth within 32 bits. */
#define FRAME_MAX ((int64_t)1 << 30)

/* Address arithmetic as the machine does it: modular, never a signed
 * overflow in C. */
static int64_t wadd(int64_t x, int64_t y) { return (int64_t)((uint64_t)x + (uint64_t)y); }
#define SEEN_NONE INT32_MIN
#define SEEN_DYN  (INT32_MIN + 1)

enum op {
    OP_OTHER,
    OP_NOP,
    OP_PUSH,
    OP_POP,
    OP_SUB_IMM,
    OP_ADD_IMM,
    OP_SUB_REG,
    OP_ADD_REG,
    OP_AND_IMM,
    OP_LEA,
    OP_MOV_REG,
    OP_MOV_IMM,
    OP_MOV_LOAD,
    OP_CMP_REG,
    OP_CALL,
    OP_JMP,
    OP_JCC,
    OP_RET,
    OP_STOP,
    OP_LEAVE,
    OP_ENTER,
    OP_PROBE_OR,
    OP_STORE,
};

/* One decoded instruction, reduced to what matters for the stack. */
typedef struct insn {
    uint64_t addr;
    uint64_t target; /* branch target, or the address a rip-relative operand names */
    int64_t imm;
    int64_t disp;
    int32_t seen;   /* depth it was last analysed with */
    int32_t cs;     /* its first callsite (index in a->calls), -1 */
    uint16_t wmask; /* general registers written (other than by op) */
    uint8_t len, op, opsz, visits;
    int8_t r0, r1, mbase, mindex;
    uint8_t mscale, is_je, tbl_load, has_mem, imm_store0;
} insn;

enum { K_UNK, K_SP, K_CONST, K_DYN };
typedef struct rv {
    int64_t v;
    int8_t k;
} rv;

enum { NSLOTS = 4 };

typedef struct state {
    rv r[16];
    /* Stack slots holding a tracked value: -O0 code and clang's
     * stacksave/stackrestore keep %rsp or a function pointer there. */
    int64_t slot_at[NSLOTS]; /* depth of the slot, 0 = free */
    rv slot_v[NSLOTS];
    int8_t cmp;       /* register the last instruction compared %rsp with */
    uint8_t page_sub; /* the last instruction was sub rsp,4096 */
    uint8_t tbl_age;  /* instructions since a table-indexed load */
} state;

/* The constants of a state (registers, then stack slots): mask bit i set
 * when value i is a known constant. */
typedef struct cstate {
    uint32_t mask;
    int64_t v[16 + NSLOTS];
    int64_t at[NSLOTS];
} cstate;

typedef struct range {
    uint64_t lo, hi;
    uint64_t cap; /* offsets map and cov cover so far (range_reach) */
    int32_t *map; /* byte offset -> insn index, -1 */
    uint8_t *cov; /* byte offset covered by an analysed instruction */
} range;

typedef struct work {
    uint64_t addr;
    state s;
} work;

struct analyzer {
    elfbin *b;
    uint64_t at_now; /* the instruction being analysed */
    csh cs;
    cs_insn *ci;
    frame *fr;
    size_t nfr, capfr;
    callsite *calls;
    size_t ncalls, capcalls;
    /* per function */
    range rg[MAX_RANGES];
    int nrg;
    insn *ins;
    size_t nins, capins;
    cstate *cst; /* per insn: the constants every way in so far agrees on */
    size_t capcst;
    work *wl;
    size_t nwl, capwl;
    frame *cur;
    int32_t jt_depth; /* deepest jump-table dispatch, or -1 */
    int32_t fp_depth; /* the depth %rbp was set to as frame pointer, or -1 */
};

static int8_t gpr(x86_reg r)
{
    switch (r) {
    case X86_REG_RAX:
    case X86_REG_EAX:
    case X86_REG_AX:
    case X86_REG_AL:
    case X86_REG_AH: return RAX;
    case X86_REG_RCX:
    case X86_REG_ECX:
    case X86_REG_CX:
    case X86_REG_CL:
    case X86_REG_CH: return RCX;
    case X86_REG_RDX:
    case X86_REG_EDX:
    case X86_REG_DX:
    case X86_REG_DL:
    case X86_REG_DH: return RDX;
    case X86_REG_RBX:
    case X86_REG_EBX:
    case X86_REG_BX:
    case X86_REG_BL:
    case X86_REG_BH: return RBX;
    case X86_REG_RSP:
    case X86_REG_ESP:
    case X86_REG_SP:
    case X86_REG_SPL: return RSP;
    case X86_REG_RBP:
    case X86_REG_EBP:
    case X86_REG_BP:
    case X86_REG_BPL: return RBP;
    case X86_REG_RSI:
    case X86_REG_ESI:
    case X86_REG_SI:
    case X86_REG_SIL: return RSI;
    case X86_REG_RDI:
    case X86_REG_EDI:
    case X86_REG_DI:
    case X86_REG_DIL: return RDI;
    case X86_REG_R8:
    case X86_REG_R8D:
    case X86_REG_R8W:
    case X86_REG_R8B: return R8;
    case X86_REG_R9:
    case X86_REG_R9D:
    case X86_REG_R9W:
    case X86_REG_R9B: return R9;
    case X86_REG_R10:
    case X86_REG_R10D:
    case X86_REG_R10W:
    case X86_REG_R10B: return R10;
    case X86_REG_R11:
    case X86_REG_R11D:
    case X86_REG_R11W:
    case X86_REG_R11B: return R11;
    case X86_REG_R12:
    case X86_REG_R12D:
    case X86_REG_R12W:
    case X86_REG_R12B: return 12;
    case X86_REG_R13:
    case X86_REG_R13D:
    case X86_REG_R13W:
    case X86_REG_R13B: return 13;
    case X86_REG_R14:
    case X86_REG_R14D:
    case X86_REG_R14W:
    case X86_REG_R14B: return 14;
    case X86_REG_R15:
    case X86_REG_R15D:
    case X86_REG_R15W:
    case X86_REG_R15B: return 15;
    case X86_REG_RIP: return RIP;
    default: return -1;
    }
}

bool noreturn_name(const char *n)
{
    static const char *const names[] = {"abort",
                                        "exit",
                                        "_exit",
                                        "_Exit",
                                        "quick_exit",
                                        "__assert_fail",
                                        "__assert_perror_fail",
                                        "__stack_chk_fail",
                                        "__fortify_fail",
                                        "__chk_fail",
                                        "longjmp",
                                        "siglongjmp",
                                        "_longjmp",
                                        "__longjmp_chk",
                                        "pthread_exit",
                                        "__cxa_throw",
                                        "__cxa_rethrow",
                                        "__cxa_bad_cast",
                                        "__cxa_bad_typeid",
                                        "__cxa_call_unexpected",
                                        "_Unwind_Resume",
                                        "_ZSt9terminatev",
                                        "err",
                                        "errx",
                                        "verr",
                                        "verrx",
                                        "__libc_fatal",
                                        "__stack_chk_fail_local",
                                        "error_at_line_noreturn",
                                        NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(n, names[i]) == 0)
            return true;
    /* libstdc++'s std::__throw_* helpers. */
    return strncmp(n, "_ZSt", 4) == 0 && strstr(n, "__throw_") != NULL;
}

analyzer *analyzer_new(elfbin *b)
{
    analyzer *a = xcalloc(1, sizeof *a);
    a->b = b;
    if (cs_open(CS_ARCH_X86, CS_MODE_64, &a->cs) != CS_ERR_OK) {
        msg_error("capstone cannot open an x86-64 disassembler");
        exit(EXIT_INPUT);
    }
    cs_option(a->cs, CS_OPT_DETAIL, CS_OPT_ON);
    a->ci = cs_malloc(a->cs);
    /* Never reallocated: frame_of's pointers stay valid. */
    a->capfr = b->nfuncs;
    a->fr = xcalloc(a->capfr, sizeof *a->fr);
    return a;
}

void analyzer_free(analyzer *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->nrg; i++) {
        free(a->rg[i].map);
        free(a->rg[i].cov);
    }
    cs_free(a->ci, 1);
    cs_close(&a->cs);
    free(a->fr);
    free(a->calls);
    free(a->ins);
    free(a->cst);
    free(a->wl);
    free(a);
}

const callsite *frame_calls(const analyzer *a, const frame *f)
{
    return a->calls ? a->calls + f->first_call : NULL;
}

/* ---- decoding ------------------------------------------------------------ */

static range *range_of(analyzer *a, uint64_t addr)
{
    for (int i = 0; i < a->nrg; i++)
        if (addr >= a->rg[i].lo && addr < a->rg[i].hi)
            return &a->rg[i];
    return NULL;
}

/* Makes r's map and cov cover the offsets below end.  They grow as the
 * analysis reaches into the range instead of spanning it from the start:
 * symbol sizes that overlap (16,000 functions each sized to the end of
 * the text) gave every function the bytes of all the later ones, 640 MB
 * set and freed in all, 3.8 s under ASan. */
static void range_reach(range *r, uint64_t end)
{
    uint64_t n = r->hi - r->lo;
    if (end > n)
        end = n;
    if (end <= r->cap)
        return;
    uint64_t cap = r->cap ? r->cap : 256;
    while (cap < end)
        cap *= 2;
    if (cap > n)
        cap = n;
    r->map = xrealloc(r->map, cap * sizeof *r->map);
    memset(r->map + r->cap, 0xff, (cap - r->cap) * sizeof *r->map);
    r->cov = xrealloc(r->cov, cap);
    memset(r->cov + r->cap, 0, cap - r->cap);
    r->cap = cap;
}

/* Marks len bytes from offset off of r covered (clipped to r's end). */
static void range_cover(range *r, uint64_t off, uint64_t len)
{
    if (len > r->hi - r->lo - off)
        len = r->hi - r->lo - off;
    range_reach(r, off + len);
    memset(r->cov + off, 1, (size_t)len);
}

static void add_range(analyzer *a, uint64_t lo, uint64_t hi)
{
    if (a->nrg == MAX_RANGES)
        return;
    range *r = &a->rg[a->nrg++];
    *r = (range){.lo = lo, .hi = hi};
    range_reach(r, 1);
}

static void reset_ranges(analyzer *a)
{
    for (int i = 0; i < a->nrg; i++) {
        free(a->rg[i].map);
        free(a->rg[i].cov);
    }
    a->nrg = 0;
}

static bool is_jcc(unsigned id)
{
    switch (id) {
    case X86_INS_JAE:
    case X86_INS_JA:
    case X86_INS_JBE:
    case X86_INS_JB:
    case X86_INS_JCXZ:
    case X86_INS_JECXZ:
    case X86_INS_JE:
    case X86_INS_JGE:
    case X86_INS_JG:
    case X86_INS_JLE:
    case X86_INS_JL:
    case X86_INS_JNE:
    case X86_INS_JNO:
    case X86_INS_JNP:
    case X86_INS_JNS:
    case X86_INS_JO:
    case X86_INS_JP:
    case X86_INS_JRCXZ:
    case X86_INS_JS:
    case X86_INS_LOOP:
    case X86_INS_LOOPE:
    case X86_INS_LOOPNE: return true;
    default: return false;
    }
}

static void fill(insn *I, const cs_insn *c)
{
    const cs_x86 *x = &c->detail->x86;
    memset(I, 0, sizeof *I);
    I->addr = c->address;
    I->len = (uint8_t)c->size;
    I->seen = SEEN_NONE;
    I->cs = -1;
    I->r0 = I->r1 = I->mbase = I->mindex = -1;
    I->op = OP_OTHER;
    const cs_x86_op *o0 = x->op_count > 0 ? &x->operands[0] : NULL;
    const cs_x86_op *o1 = x->op_count > 1 ? &x->operands[1] : NULL;
    for (int i = 0; i < x->op_count; i++) {
        const cs_x86_op *o = &x->operands[i];
        if (o->type == X86_OP_MEM && !I->has_mem) {
            I->has_mem = 1;
            I->mbase = gpr(o->mem.base);
            I->mindex = gpr(o->mem.index);
            I->mscale = (uint8_t)o->mem.scale;
            I->disp = o->mem.disp;
            if (I->mbase == RIP)
                I->target = c->address + c->size + o->mem.disp;
            if (I->mindex >= 0 && I->mindex < 16 &&
                (o->mem.scale == 4 || o->mem.scale == 8))
                I->tbl_load = 1;
        } else if (o->type == X86_OP_REG && (o->access & CS_AC_WRITE)) {
            int8_t g = gpr(o->reg);
            if (g >= 0 && g < 16)
                I->wmask |= (uint16_t)(1u << g);
        }
    }
    for (int i = 0; i < c->detail->regs_write_count; i++) {
        int8_t g = gpr(c->detail->regs_write[i]);
        if (g >= 0 && g < 16)
            I->wmask |= (uint16_t)(1u << g);
    }
    bool r0reg = o0 && o0->type == X86_OP_REG;
    if (r0reg) {
        I->r0 = gpr(o0->reg);
        I->opsz = o0->size;
    }
    unsigned id = c->id;
    switch (id) {
    case X86_INS_NOP:
    case X86_INS_ENDBR64:
    case X86_INS_FNOP:
        I->op = OP_NOP;
        I->has_mem = 0;
        I->tbl_load = 0;
        return;
    case X86_INS_PUSH:
    case X86_INS_PUSHFQ:
    case X86_INS_PUSHF:
        I->op = OP_PUSH;
        I->imm = (o0 && o0->size == 2) || id == X86_INS_PUSHF ? 2 : 8;
        return;
    case X86_INS_POP:
    case X86_INS_POPFQ:
    case X86_INS_POPF:
        I->op = OP_POP;
        I->imm = (o0 && o0->size == 2) || id == X86_INS_POPF ? 2 : 8;
        return;
    case X86_INS_SUB:
    case X86_INS_ADD:
        if (r0reg && o1 && o1->type == X86_OP_IMM) {
            I->op = id == X86_INS_SUB ? OP_SUB_IMM : OP_ADD_IMM;
            I->imm = o1->imm;
        } else if (r0reg && o1 && o1->type == X86_OP_REG) {
            I->op = id == X86_INS_SUB ? OP_SUB_REG : OP_ADD_REG;
            I->r1 = gpr(o1->reg);
        }
        return;
    case X86_INS_AND:
        if (r0reg && o1 && o1->type == X86_OP_IMM) {
            I->op = OP_AND_IMM;
            I->imm = o1->imm;
        }
        return;
    case X86_INS_OR:
        /* or qword [rsp+X], 0: gcc's stack-clash probe */
        if (o0 && o0->type == X86_OP_MEM && gpr(o0->mem.base) == RSP && o1 &&
            o1->type == X86_OP_IMM && o1->imm == 0)
            I->op = OP_PROBE_OR;
        return;
    case X86_INS_LEA:
        if (r0reg) {
            I->op = OP_LEA;
            I->has_mem = 0; /* computes an address, touches nothing */
            I->tbl_load = 0;
        }
        return;
    case X86_INS_MOV:
    case X86_INS_MOVABS:
        if (r0reg && o1 && o1->type == X86_OP_REG) {
            I->op = OP_MOV_REG;
            I->r1 = gpr(o1->reg);
        } else if (r0reg && o1 && o1->type == X86_OP_IMM) {
            I->op = OP_MOV_IMM;
            I->imm = o1->imm;
        } else if (r0reg && o1 && o1->type == X86_OP_MEM) {
            I->op = OP_MOV_LOAD;
        } else if (o0 && o0->type == X86_OP_MEM && o1 && o1->type == X86_OP_IMM &&
                   o1->imm == 0) {
            I->imm_store0 = 1; /* clang's probe: mov qword [rsp], 0 */
        } else if (o0 && o0->type == X86_OP_MEM && o1 && o1->type == X86_OP_REG &&
                   o1->size == 8) {
            I->op = OP_STORE; /* a register saved to a stack slot */
            I->r1 = gpr(o1->reg);
        }
        return;
    case X86_INS_CMP:
        if (r0reg && o1 && o1->type == X86_OP_REG) {
            I->op = OP_CMP_REG;
            I->r1 = gpr(o1->reg);
        }
        return;
    case X86_INS_CALL:
        I->op = OP_CALL;
        if (o0 && o0->type == X86_OP_IMM)
            I->target = (uint64_t)o0->imm;
        I->has_mem = 0; /* a memory operand here is read, not a stack slot */
        return;
    case X86_INS_JMP:
        I->op = OP_JMP;
        if (o0 && o0->type == X86_OP_IMM)
            I->target = (uint64_t)o0->imm;
        I->has_mem = 0;
        return;
    case X86_INS_RET:
    case X86_INS_RETF:
    case X86_INS_RETFQ: I->op = OP_RET; return;
    case X86_INS_UD2:
    case X86_INS_HLT:
    case X86_INS_INT3:
    case X86_INS_UD0: I->op = OP_STOP; return;
    case X86_INS_LEAVE: I->op = OP_LEAVE; return;
    case X86_INS_ENTER:
        I->op = OP_ENTER;
        /* imm16 and imm8, unsigned (capstone may sign-extend them) */
        I->imm = o0 ? (o0->imm & 0xffff) : 0;
        I->disp = o1 ? (o1->imm & 0xff) : 0;
        return;
    default: break;
    }
    if (is_jcc(id)) {
        I->op = OP_JCC;
        if (o0 && o0->type == X86_OP_IMM)
            I->target = (uint64_t)o0->imm;
        I->is_je = id == X86_INS_JE;
        I->has_mem = 0;
    }
}

/* Index of the instruction at addr (decoding it on first use), -1 when
 * addr is outside the function, -2 when undecodable. */
static long decode_at(analyzer *a, uint64_t addr)
{
    range *r = range_of(a, addr);
    if (!r)
        return -1;
    range_reach(r, addr - r->lo + 1);
    int32_t *slot = &r->map[addr - r->lo];
    if (*slot >= 0)
        return *slot;
    size_t avail;
    const uint8_t *p = elfbin_code(a->b, addr, &avail);
    if (!p)
        return -2;
    if (avail > r->hi - addr)
        avail = r->hi - addr;
    if (avail > 16)
        avail = 16;
    uint64_t at = addr;
    if (!cs_disasm_iter(a->cs, &p, &avail, &at, a->ci))
        return -2;
    insn *I = VEC_PUSH(a->ins, a->nins, a->capins);
    fill(I, a->ci);
    *slot = (int32_t)(a->nins - 1);
    return *slot;
}

/* ---- the flow analysis ------------------------------------------------------ */

static void note_depth(analyzer *a, int64_t d)
{
    if (d > FRAME_MAX) {
        a->cur->flags |= FR_UNKNOWN;
        if (!a->cur->bad_at)
            a->cur->bad_at = a->at_now;
        return;
    }
    if (d > a->cur->frame)
        a->cur->frame = d;
    if (d > a->cur->depth)
        a->cur->depth = d;
}

static void flag(analyzer *a, uint32_t f, uint64_t at)
{
    a->cur->flags |= f;
    if ((f & FR_UNKNOWN) && !a->cur->bad_at)
        a->cur->bad_at = at;
}

static void push_work(analyzer *a, uint64_t addr, const state *s)
{
    work *w = VEC_PUSH(a->wl, a->nwl, a->capwl);
    w->addr = addr;
    w->s = *s;
}

/* A call reached again (a deeper %rsp, or conflicting constants) is one
 * call site: the deeper depth, and %rdi known only if every way agrees. */
static callsite *merge_call(analyzer *a, const insn *I, const state *s, int kind)
{
    /* Only this instruction's own callsites (one, rarely two kinds). */
    for (size_t i = I->cs < 0 ? a->ncalls : (size_t)I->cs; i < a->ncalls; i++) {
        callsite *c = &a->calls[i];
        if (c->at != I->addr || c->kind != kind)
            continue;
        int32_t d = s->r[RSP].k == K_SP ? (int32_t)s->r[RSP].v : -1;
        if (d < 0 || c->depth < 0)
            c->depth = -1;
        else if (d > c->depth)
            c->depth = d;
        if (s->r[RDI].k != K_CONST || (uint64_t)s->r[RDI].v != c->arg0)
            c->arg0_known = 0;
        return c;
    }
    return NULL;
}

static callsite *add_call(analyzer *a, insn *I, const state *s, int kind)
{
    callsite *c = merge_call(a, I, s, kind);
    if (c)
        return c;
    if (I->cs < 0)
        I->cs = (int32_t)a->ncalls;
    c = VEC_PUSH(a->calls, a->ncalls, a->capcalls);
    memset(c, 0, sizeof *c);
    c->at = I->addr;
    c->next = I->addr + I->len;
    c->kind = (uint8_t)kind;
    c->depth = s->r[RSP].k == K_SP ? (int32_t)s->r[RSP].v : -1;
    if (s->r[RDI].k == K_CONST) {
        c->arg0 = (uint64_t)s->r[RDI].v;
        c->arg0_known = 1;
    }
    a->cur->ncalls++;
    return c;
}

/* Worst-case bytes `and rsp,-n` drops: %rsp is 16-aligned at the caller's
 * call, so at depth d it is d mod 16 off; the rest of n is unknown. */
static int32_t align_pad(int64_t d, int64_t n)
{
    int64_t mis = (16 - d % 16) % 16;
    return n > 16 ? (int32_t)(n - 16 + mis) : (int32_t)mis;
}

/* %rsp got a value: keep following if it is a stack address. */
static bool set_rsp(analyzer *a, state *s, rv v, const insn *I)
{
    if (v.k == K_SP) {
        s->r[RSP] = v;
        return true;
    }
    if (v.k == K_DYN) {
        s->r[RSP] = v;
        flag(a, FR_DYNAMIC, I->addr);
        return true;
    }
    /* Loaded from memory or from a value unrelated to this stack: a
     * switch to another stack (mote's arch_switch, longjmp). */
    flag(a, I->op == OP_MOV_LOAD || I->op == OP_POP ? FR_SWITCH : FR_UNKNOWN, I->addr);
    return false;
}

static void tail_or_jump(analyzer *a, insn *I, state *s, uint64_t t, bool *follow)
{
    *follow = false;
    if (range_of(a, t)) {
        *follow = true;
        return;
    }
    const char *ext = elfbin_plt_name(a->b, t);
    int fi = elfbin_func_at(a->b, t);
    if (fi >= 0 && (a->b->funcs[fi].flags & FN_COLD) && a->cur->cold < 0) {
        /* gcc's foo.cold: the same frame continued elsewhere. */
        const mfunc *f = &a->b->funcs[fi];
        add_range(a, f->addr, f->addr + f->size);
        a->cur->cold = fi;
        a->cur->flags |= FR_COLD;
        *follow = true;
        return;
    }
    if (ext || (fi >= 0 && a->b->funcs[fi].addr == t) || elfbin_is_plt(a->b, t)) {
        callsite *c = add_call(a, I, s, CS_TAIL);
        c->target = t;
        c->ext = ext;
        return;
    }
    callsite *c = add_call(a, I, s, CS_BADJMP);
    c->target = t;
    flag(a, FR_UNKNOWN, I->addr);
}

static rv rv_sp(int64_t d)
{
    rv v = {d, K_SP};
    return v;
}
static rv rv_const(int64_t c)
{
    rv v = {c, K_CONST};
    return v;
}
static rv rv_dyn(void)
{
    rv v = {0, K_DYN};
    return v;
}
static rv rv_unk(void)
{
    rv v = {0, K_UNK};
    return v;
}

static void clobber_call(state *s)
{
    static const int caller_saved[] = {RAX, RCX, RDX, RSI, RDI, R8, R9, R10, R11};
    for (size_t i = 0; i < sizeof caller_saved / sizeof *caller_saved; i++)
        s->r[caller_saved[i]] = rv_unk();
}

/* The depth of the 8-byte stack slot an instruction addresses, or 0. */
static int64_t slot_addr(const state *s, const insn *I)
{
    if (I->mbase < 0 || I->mbase >= 16 || I->mindex >= 0)
        return 0;
    rv b = s->r[I->mbase];
    if (b.k != K_SP)
        return 0;
    int64_t d = (int64_t)((uint64_t)b.v - (uint64_t)I->disp);
    return d > 0 ? d : 0;
}

static const rv *const_val(const state *s, int i)
{
    return i < 16 ? &s->r[i] : &s->slot_v[i - 16];
}

static void const_snap(const state *s, cstate *c)
{
    c->mask = 0;
    for (int i = 0; i < 16 + NSLOTS; i++) {
        const rv *v = const_val(s, i);
        if (v->k != K_CONST)
            continue;
        c->mask |= 1u << i;
        c->v[i] = v->v;
        if (i >= 16)
            c->at[i - 16] = s->slot_at[i - 16];
    }
}

/* Another way into an analysed instruction: true when it disagrees with a
 * constant every earlier way had (a `cond ? f : g` passed to mote_go).
 * Then c keeps only the constants both agree on, s forgets the others and
 * is followed once more, so no call keeps one way's %rdi as the only one.
 * The masks only shrink, so this ends. */
static bool const_meet(cstate *c, state *s)
{
    uint32_t keep = 0;
    for (int i = 0; i < 16 + NSLOTS; i++) {
        if (!(c->mask & (1u << i)))
            continue;
        const rv *v = const_val(s, i);
        if (v->k == K_CONST && v->v == c->v[i] &&
            (i < 16 || s->slot_at[i - 16] == c->at[i - 16]))
            keep |= 1u << i;
    }
    if (keep == c->mask)
        return false;
    c->mask = keep;
    for (int i = 0; i < 16 + NSLOTS; i++) {
        rv *v = i < 16 ? &s->r[i] : &s->slot_v[i - 16];
        if (v->k == K_CONST && !(keep & (1u << i)))
            *v = rv_unk();
    }
    return true;
}

/* Follows one path from addr until it ends or joins analysed code. */
static void run_path(analyzer *a, uint64_t addr, state s)
{
    for (;;) {
        long idx = decode_at(a, addr);
        if (idx == -1)
            return; /* fell off the end of the function */
        if (idx == -2) {
            flag(a, FR_UNKNOWN, addr);
            return;
        }
        insn *I = &a->ins[idx];
        a->at_now = addr;
        if (s.r[RSP].k == K_SP && (s.r[RSP].v > FRAME_MAX || s.r[RSP].v < -FRAME_MAX)) {
            flag(a, FR_UNKNOWN, addr); /* an absurd frame: not followed */
            return;
        }
        int32_t key = s.r[RSP].k == K_SP ? (int32_t)s.r[RSP].v : SEEN_DYN;
        if (a->capcst < a->nins) {
            a->capcst = a->nins * 2;
            a->cst = xrealloc(a->cst, a->capcst * sizeof *a->cst);
        }
        cstate *cs = &a->cst[idx];
        if (I->seen == SEEN_NONE) {
            const_snap(&s, cs);
        } else if (!const_meet(cs, &s)) {
            if (I->seen == key)
                return;
            if (key != SEEN_DYN && I->seen != SEEN_DYN && key < I->seen)
                return; /* already followed from deeper */
            if (key == SEEN_DYN && I->seen != SEEN_DYN && I->visits)
                return;
            if (++I->visits > VISITS_MAX) {
                flag(a, FR_DYNAMIC, I->addr);
                return;
            }
        }
        I->seen = key;
        range *rg = range_of(a, addr);
        range_cover(rg, addr - rg->lo, I->len);
        a->cur->ninsns++;

        rv *sp = &s.r[RSP];
        uint64_t next = addr + I->len;
        int8_t cmp = s.cmp;
        s.cmp = -1;
        uint8_t page_sub = s.page_sub;
        s.page_sub = I->op == OP_SUB_IMM && I->r0 == RSP && I->imm == 4096;
        if (page_sub && I->has_mem && I->mbase == RSP && I->mindex < 0 && I->disp >= 0 &&
            I->disp < 4096 && (I->op == OP_PROBE_OR || I->imm_store0))
            flag(a, FR_PROBE, addr);
        s.tbl_age = I->tbl_load ? 0 : (uint8_t)(s.tbl_age < 255 ? s.tbl_age + 1 : 255);

        /* Bytes below %rsp (the red zone) and frame-pointer accesses. */
        if (I->has_mem && I->mbase >= 0 && I->mbase < 16 && I->mindex < 0) {
            rv base = s.r[I->mbase];
            if (base.k == K_SP) {
                int64_t acc = (int64_t)((uint64_t)base.v - (uint64_t)I->disp);
                if (acc > a->cur->depth && acc < (1 << 30))
                    a->cur->depth = (int32_t)acc;
                if (sp->k == K_SP && acc > sp->v && acc < (1 << 30)) {
                    int64_t rz = acc - sp->v; /* both within +-2^30: no overflow */
                    if (rz > a->cur->redzone && rz <= 4096)
                        a->cur->redzone = (int32_t)rz;
                }
            }
        }

        int8_t r0 = I->r0, r1 = I->r1;
        bool go = true;
        switch (I->op) {
        case OP_NOP: break;
        case OP_PUSH:
            if (sp->k == K_SP)
                sp->v = wadd(sp->v, I->imm);
            break;
        case OP_POP:
            if (sp->k == K_SP)
                sp->v = wadd(sp->v, (int64_t)(0 - (uint64_t)I->imm));
            if (r0 == RSP) {
                go = set_rsp(a, &s, rv_unk(), I);
            } else if (r0 >= 0 && r0 < 16) {
                s.r[r0] = rv_unk();
            }
            break;
        case OP_SUB_IMM:
        case OP_ADD_IMM: {
            uint64_t delta =
                I->op == OP_SUB_IMM ? (uint64_t)I->imm : 0 - (uint64_t)I->imm;
            if (r0 < 0 || r0 >= 16)
                break;
            rv *d = &s.r[r0];
            if (d->k == K_SP)
                d->v = (int64_t)((uint64_t)d->v + delta);
            else if (d->k == K_CONST)
                d->v = (int64_t)((uint64_t)d->v - delta);
            break;
        }
        case OP_SUB_REG:
        case OP_ADD_REG: {
            if (r0 < 0 || r0 >= 16)
                break;
            rv *d = &s.r[r0];
            rv src = r1 >= 0 && r1 < 16 ? s.r[r1] : rv_unk();
            if (I->op == OP_SUB_REG && r0 == r1) {
                *d = rv_const(0);
            } else if (src.k == K_CONST && (d->k == K_SP || d->k == K_CONST)) {
                /* modular, as the machine computes it (constants may be
                 * any 64-bit value: no signed overflow) */
                uint64_t delta = I->op == OP_SUB_REG ? (uint64_t)src.v : -(uint64_t)src.v;
                d->v = (int64_t)((uint64_t)d->v + (d->k == K_SP ? delta : -delta));
            } else if (d->k == K_SP || d->k == K_DYN) {
                *d = rv_dyn();
                if (r0 == RSP)
                    flag(a, FR_DYNAMIC, addr);
            } else {
                *d = rv_unk();
            }
            break;
        }
        case OP_AND_IMM: {
            if (r0 < 0 || r0 >= 16)
                break;
            rv *d = &s.r[r0];
            if (r0 == RSP && d->k == K_SP && I->imm < 0 && I->imm > -(1 << 20)) {
                int64_t n = -I->imm;
                d->v += align_pad(d->v, n);
                flag(a, FR_ALIGN, addr);
                if (n > a->cur->align)
                    a->cur->align = (int32_t)n;
            } else if (d->k == K_CONST) {
                d->v &= I->imm;
            } else if (d->k == K_SP) {
                *d = rv_dyn();
            }
            break;
        }
        case OP_LEA: {
            rv v = rv_unk();
            if (I->mbase == RIP && I->mindex < 0)
                v = rv_const((int64_t)I->target);
            else if (I->mbase >= 0 && I->mbase < 16) {
                rv b = s.r[I->mbase];
                if (I->mindex >= 0)
                    v = b.k == K_SP || b.k == K_DYN ? rv_dyn() : rv_unk();
                else if (b.k == K_SP)
                    v = rv_sp((int64_t)((uint64_t)b.v - (uint64_t)I->disp));
                else if (b.k == K_CONST)
                    v = rv_const(wadd(b.v, I->disp));
                else if (b.k == K_DYN)
                    v = rv_dyn();
            }
            if (I->opsz != 8 && v.k != K_CONST)
                v = rv_unk();
            if (r0 == RSP)
                go = set_rsp(a, &s, v, I);
            else if (r0 >= 0 && r0 < 16)
                s.r[r0] = v;
            break;
        }
        case OP_MOV_REG: {
            rv v = r1 >= 0 && r1 < 16 ? s.r[r1] : rv_unk();
            if (I->opsz == 4 && v.k == K_CONST)
                v.v = (uint32_t)v.v;
            else if (I->opsz != 8)
                v = rv_unk();
            if (r0 == RSP)
                go = set_rsp(a, &s, v, I);
            else if (r0 >= 0 && r0 < 16)
                s.r[r0] = v;
            break;
        }
        case OP_MOV_IMM: {
            rv v = rv_const(I->opsz == 4 ? (int64_t)(uint32_t)I->imm : I->imm);
            if (I->opsz < 4)
                v = rv_unk();
            if (r0 == RSP)
                go = set_rsp(a, &s, rv_unk(), I);
            else if (r0 >= 0 && r0 < 16)
                s.r[r0] = v;
            break;
        }
        case OP_MOV_LOAD: {
            rv v = rv_unk();
            int64_t at = slot_addr(&s, I);
            for (int k = 0; at && k < NSLOTS; k++)
                if (s.slot_at[k] == at)
                    v = s.slot_v[k];
            if (I->opsz != 8)
                v = rv_unk();
            if (r0 == RSP)
                go = set_rsp(a, &s, v, I);
            else if (r0 >= 0 && r0 < 16)
                s.r[r0] = v;
            break;
        }
        case OP_STORE: {
            int64_t at = slot_addr(&s, I);
            if (!at)
                break;
            rv v = r1 >= 0 && r1 < 16 ? s.r[r1] : rv_unk();
            int k, free_k = -1;
            for (k = 0; k < NSLOTS && s.slot_at[k] != at; k++)
                if (!s.slot_at[k] && free_k < 0)
                    free_k = k;
            if (k == NSLOTS)
                k = free_k >= 0 ? free_k : (int)((uint64_t)at / 8 % NSLOTS);
            s.slot_at[k] = v.k == K_UNK ? 0 : at;
            s.slot_v[k] = v;
            break;
        }
        case OP_CMP_REG:
            if (r0 == RSP && r1 >= 0 && r1 < 16)
                s.cmp = r1;
            else if (r1 == RSP && r0 >= 0 && r0 < 16)
                s.cmp = r0;
            break;
        case OP_PROBE_OR: flag(a, FR_PROBE, addr); break;
        case OP_LEAVE: {
            rv fp = s.r[RBP];
            if (fp.k == K_SP) {
                *sp = rv_sp(wadd(fp.v, -8));
            } else if (fp.k == K_DYN) {
                *sp = rv_dyn();
            } else {
                flag(a, FR_UNKNOWN, addr);
                go = false;
            }
            s.r[RBP] = rv_unk();
            break;
        }
        case OP_ENTER:
            if (sp->k == K_SP) {
                sp->v = wadd(sp->v, 8);
                s.r[RBP] = rv_sp(sp->v);
                sp->v = wadd(sp->v, I->imm + 8 * (I->disp & 31));
            } else {
                s.r[RBP] = rv_dyn();
            }
            break;
        case OP_CALL: {
            if (sp->k == K_SP)
                note_depth(a, sp->v);
            const char *ext = NULL;
            int kind = CS_ICALL;
            uint64_t t = 0;
            if (I->target && I->mbase < 0) {
                t = I->target;
                kind = CS_CALL;
                ext = elfbin_plt_name(a->b, t);
                if (t == next) { /* call next; pop: a pc read, not a call */
                    if (sp->k == K_SP)
                        sp->v += 8;
                    break;
                }
            } else if (I->mbase == RIP && I->mindex < 0) {
                /* call *slot(%rip): -fno-plt, or a function pointer */
                ext = elfbin_slot_name(a->b, I->target);
                kind = ext ? CS_CALL : CS_ICALL;
            }
            callsite *c = add_call(a, I, &s, kind);
            c->target = t;
            c->ext = ext;
            if (kind == CS_ICALL)
                flag(a, FR_INDIRECT, addr);
            const char *callee = ext;
            if (!callee && t) {
                int fi = elfbin_func_start(a->b, t);
                callee = fi >= 0 ? a->b->funcs[fi].name : NULL;
            }
            if (callee && noreturn_name(callee))
                go = false;
            clobber_call(&s);
            break;
        }
        case OP_JMP:
            if (I->target && I->mbase < 0) {
                bool follow;
                tail_or_jump(a, I, &s, I->target, &follow);
                if (follow) {
                    addr = I->target;
                    continue;
                }
                go = false;
                break;
            }
            go = false;
            if (I->mindex >= 0) {
                /* jmp [table + i*8]: a switch */
            } else if (I->mbase == RIP) {
                const char *ext = elfbin_slot_name(a->b, I->target);
                callsite *c = add_call(a, I, &s, ext ? CS_TAIL : CS_IJMP);
                c->ext = ext;
                if (!ext)
                    flag(a, FR_INDIRECT, addr);
                break;
            } else if (s.tbl_age > TBL_AGE_MAX) {
                add_call(a, I, &s, CS_IJMP);
                flag(a, FR_INDIRECT, addr);
                break;
            }
            if (sp->k == K_SP && sp->v > a->jt_depth)
                a->jt_depth = (int32_t)sp->v;
            break;
        case OP_JCC: {
            if (!I->target)
                break;
            if (cmp >= 0) {
                /* cmp rsp,reg; jcc: a probe loop walking %rsp down to reg.
                 * Its exit sees %rsp == reg; the back edge adds nothing. */
                rv bound = s.r[cmp];
                flag(a, FR_PROBE, addr);
                state t = s;
                if (bound.k == K_SP || bound.k == K_DYN) {
                    t.r[RSP] = bound;
                    if (bound.k == K_DYN)
                        flag(a, FR_DYNAMIC, addr);
                } else {
                    t.r[RSP] = rv_dyn();
                    flag(a, FR_DYNAMIC, addr);
                }
                if (t.r[RSP].k == K_SP)
                    note_depth(a, t.r[RSP].v);
                if (I->target <= addr) {
                    s = t; /* only the exit */
                } else if (I->is_je) {
                    push_work(a, I->target, &t);
                } else {
                    push_work(a, I->target, &s);
                    s = t;
                }
                break;
            }
            bool follow;
            tail_or_jump(a, I, &s, I->target, &follow);
            if (follow)
                push_work(a, I->target, &s);
            break;
        }
        case OP_RET:
        case OP_STOP: go = false; break;
        default: /* OP_OTHER */
            if (I->wmask & (1u << RSP)) {
                flag(a, FR_UNKNOWN, addr);
                go = false;
            }
            for (int g = 0; g < 16; g++)
                if (g != RSP && (I->wmask & (1u << g)))
                    s.r[g] = rv_unk();
            break;
        }
        /* A write through op other than the tracked destination. */
        if (I->op != OP_OTHER && I->op != OP_CALL)
            for (int g = 0; g < 16; g++)
                if (g != RSP && g != r0 && (I->wmask & (1u << g)))
                    s.r[g] = rv_unk();
        if (r0 == RBP && s.r[RBP].k == K_SP && a->fp_depth < 0)
            a->fp_depth = (int32_t)s.r[RBP].v;
        if (sp->k == K_SP)
            note_depth(a, sp->v);
        if (!go)
            return;
        addr = next;
    }
}

static void drain(analyzer *a)
{
    while (a->nwl) {
        work w = a->wl[--a->nwl];
        run_path(a, w.addr, w.s);
    }
}

static void init_state(state *s, int32_t depth, int32_t fp)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 16; i++)
        s->r[i] = rv_unk();
    s->r[RSP] = rv_sp(depth);
    if (fp >= 0)
        s->r[RBP] = rv_sp(fp);
    s->cmp = -1;
    s->tbl_age = 255;
}

/* Code recursive descent did not reach: jump-table cases and landing pads,
 * at the depth the body runs at. */
static void sweep_gaps(analyzer *a)
{
    for (int pass = 0; pass < 8; pass++) {
        bool seeded = false;
        for (int r = 0; r < a->nrg; r++) {
            range *rg = &a->rg[r];
            /* Another function's code is not this one's gap: with symbol
             * sizes that overlap (hand-written or hostile .size), sweeping
             * it would analyse every later function again, n^2 in all. */
            uint64_t lim = rg->hi - rg->lo;
            int nf = elfbin_func_at(a->b, rg->lo);
            if (nf >= 0 && (size_t)nf + 1 < a->b->nfuncs &&
                a->b->funcs[nf + 1].addr > rg->lo && a->b->funcs[nf + 1].addr < rg->hi)
                lim = a->b->funcs[nf + 1].addr - rg->lo;
            range_reach(rg, lim);
            for (uint64_t off = 0; off < lim;) {
                if (rg->cov[off]) {
                    off++;
                    continue;
                }
                uint64_t at = rg->lo + off;
                long idx = decode_at(a, at);
                if (idx < 0) {
                    off++;
                    continue;
                }
                insn *I = &a->ins[idx];
                if (I->op == OP_NOP || (I->op == OP_STOP && I->len == 1) ||
                    I->seen != SEEN_NONE) {
                    range_cover(rg, off, I->len);
                    off += I->len;
                    continue;
                }
                state s;
                init_state(&s, a->jt_depth >= 0 ? a->jt_depth : a->cur->frame,
                           a->fp_depth);
                a->cur->flags |= FR_GAPS;
                run_path(a, at, s);
                drain(a);
                seeded = true;
                if (!rg->cov[off])
                    off++;
            }
        }
        if (!seeded)
            break;
    }
}

static void analyze(analyzer *a, int fi)
{
    const mfunc *f = &a->b->funcs[fi];
    frame *fr = VEC_PUSH(a->fr, a->nfr, a->capfr);
    memset(fr, 0, sizeof *fr);
    fr->func = fi;
    fr->cold = -1;
    fr->frame = fr->depth = 8;
    fr->first_call = (uint32_t)a->ncalls;
    a->b->funcs[fi].fi = (int)(a->nfr - 1);
    a->cur = fr;
    a->nins = 0;
    a->nwl = 0;
    a->jt_depth = -1;
    a->fp_depth = -1;
    reset_ranges(a);
    add_range(a, f->addr, f->addr + (f->size ? f->size : 1));
    state s;
    init_state(&s, 8, -1);
    run_path(a, f->addr, s);
    drain(a);
    sweep_gaps(a);
    if (fr->ncalls == 0)
        fr->flags |= FR_LEAF;
    if (fr->redzone > 0)
        fr->flags |= FR_REDZONE;
    if (fr->depth < fr->frame)
        fr->depth = fr->frame;
    a->cur = NULL;
}

const frame *frame_of(analyzer *a, int fi)
{
    if (fi < 0 || (size_t)fi >= a->b->nfuncs)
        return NULL;
    if (a->b->funcs[fi].flags & FN_COLD)
        return NULL;
    if (a->b->funcs[fi].fi < 0)
        analyze(a, fi);
    return &a->fr[a->b->funcs[fi].fi];
}

void frames_all(analyzer *a)
{
    for (size_t i = 0; i < a->b->nfuncs; i++)
        frame_of(a, (int)i);
}
