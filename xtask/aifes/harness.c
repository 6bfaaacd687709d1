/* The AIfES side of `cargo xtask aifes` (tapeplan's own code, not AIfES's): builds one of three
 * networks with AIfES's public API, trains it on the rows, epoch orders and initial parameters
 * the planner exported into the generated header (`run.h`), times every `aialgo_train_model`
 * call with the board's APB timer 0, and reports over semihosting. The header picks the network:
 *   - RUN_MODEL_CNN 0: the digits MLP of firmware-demo/models/demo.run (64-32-10 tanh, SGD),
 *     its rows as u8 pixel counts scaled by RUN_PIXEL_SCALE;
 *   - RUN_MODEL_CNN 1: the digits CNN of firmware-demo/models/digits_cnn.run (Conv2d(1, C1, 3,
 *     padding 1) -> ReLU -> MaxPool2d(2) -> Conv2d(C1, C2, 3, padding 1) -> ReLU ->
 *     MaxPool2d(2) -> Flatten -> Linear(4 C2, 10), channels first, Adam), its rows as f32
 *     features (their bits);
 *   - RUN_MODEL_CNN 2: MNIST-1D's CNN of firmware-demo/models/mnist1d.run (its ConvBase:
 *     Conv1d(1, 25, 5, stride 2, padding 1) -> ReLU -> Conv1d(25, 25, 3, 2, 1) -> ReLU ->
 *     Conv1d(25, 25, 3, 2, 1) -> ReLU -> Flatten -> Linear(125, 10), Adam), each Conv1d as
 *     AIfES's conv2d over a height-1 input, its rows as f32 features (their bits).
 * Every way the output is a softmax with the mean cross-entropy over the batch.
 *
 * Built with -DBASELINE it does everything but call AIfES (the same rows loaded, the same
 * report): the code-size difference between the two images is AIfES's code.
 *
 * The initial parameters come in AIfES's layouts (the xtask transposes what differs), tensor
 * after tensor in the model's order; the final ones are reported the same way.
 *
 * Report lines (stdout, semihosting SYS_WRITE0), numbers decimal, `f32` as 8 hex digits of
 * their bits:
 *   aifes-harness 1
 *   mem parameter_bytes P training_bytes T batch_bytes B
 *   loss STEP HEX          the batch's loss before the step (not timed)
 *   epoch_ticks E TICKS steps N
 *   param INDEX HEX        every final parameter (AIfES's layouts, the model's order)
 *   stack_bytes S
 *   end
 */
#include <stdint.h>
#include <string.h>
#include "run.h"
#ifndef BASELINE
#include "aifes.h"
#endif

/* ---- semihosting and the exit ---- */
static int semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static void put(const char *s) { semihost(0x04, s); }

static void put_line(const char *key, uint32_t a, int hex, uint32_t b, int has_b)
{
    char buf[64];
    char *p = buf;
    while (*key) *p++ = *key++;
    *p++ = ' ';
    char tmp[12];
    int n = 0;
    do { tmp[n++] = (char)('0' + a % 10); a /= 10; } while (a);
    while (n) *p++ = tmp[--n];
    if (has_b) {
        *p++ = ' ';
        if (hex) {
            for (int i = 7; i >= 0; i--) *p++ = "0123456789abcdef"[(b >> (4 * i)) & 15];
        } else {
            do { tmp[n++] = (char)('0' + b % 10); b /= 10; } while (b);
            while (n) *p++ = tmp[--n];
        }
    }
    *p++ = '\n';
    *p = 0;
    put(buf);
}

static void put_kv(const char *key, uint32_t v) { put_line(key, v, 0, 0, 0); }

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

__attribute__((noreturn)) static void exit_with(int failed)
{
    /* SYS_EXIT with ADP_Stopped_ApplicationExit (0x20026) or ADP_Stopped_InternalError. */
    semihost(0x18, (const void *)(uintptr_t)(failed ? 0x20024 : 0x20026));
    for (;;) {
    }
}

/* ---- the clock: the board's CMSDK APB timer 0 (mps2-an386: 0x4000_0000, on the 25 MHz
   peripheral clock, the core clock's), free-running from 2^32 - 1 down, no interrupt. Not
   SysTick: its 24 bits wrap after 2^24 ticks, 671 M instructions under -icount shift=0, and
   AIfES's MNIST-1D step is longer; counting SysTick's wraps in its exception would push an
   exception frame onto the painted stack. 2^32 ticks are 171 G instructions. ---- */
#define TIMER0_CTRL (*(volatile uint32_t *)0x40000000u)
#define TIMER0_VALUE (*(volatile uint32_t *)0x40000004u)
#define TIMER0_RELOAD (*(volatile uint32_t *)0x40000008u)

/* Ticks since the timer started, counting up (a step's difference stays right across the
   timer's one wrap, modulo 2^32). */
static uint32_t ticks_now(void) { return 0xFFFFFFFFu - TIMER0_VALUE; }

/* ---- stack painting, as firmware-demo/src/rt.rs does ---- */
extern uint32_t _sbss, _ebss, _sdata, _edata, _sidata, _stack_top;
#define PAINT 0x5AC3A55Au

__attribute__((noinline)) static void paint_stack(void)
{
    uint32_t sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (uint32_t *w = &_ebss; (uint32_t)w < sp - 64; w++) *w = PAINT;
}

static uint32_t stack_high_water_bytes(void)
{
    uint32_t *w = &_ebss;
    while ((uint32_t)w < (uint32_t)&_stack_top && *w == PAINT) w++;
    return (uint32_t)&_stack_top - (uint32_t)w;
}

/* ---- the run ---- */
static float batch_x[RUN_BATCH * RUN_D_IN];
static float batch_t[RUN_BATCH * RUN_D_OUT];
#ifndef BASELINE
static uint8_t parameter_memory[RUN_PARAMS * 4 + 64] __attribute__((aligned(8)));
static uint8_t training_memory[RUN_TRAINING_MEMORY_CAP] __attribute__((aligned(8)));
#endif

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void load_batch(const uint16_t *rows)
{
    for (uint32_t r = 0; r < RUN_BATCH; r++) {
#if RUN_MODEL_CNN
        const uint32_t *row = &RUN_FEATURE_BITS[(uint32_t)rows[r] * RUN_D_IN];
        for (uint32_t i = 0; i < RUN_D_IN; i++) batch_x[r * RUN_D_IN + i] = bits_f32(row[i]);
#else
        const uint8_t *px = &RUN_PIXELS[(uint32_t)rows[r] * RUN_D_IN];
        for (uint32_t i = 0; i < RUN_D_IN; i++) batch_x[r * RUN_D_IN + i] = (float)px[i] * RUN_PIXEL_SCALE;
#endif
        for (uint32_t k = 0; k < RUN_D_OUT; k++) batch_t[r * RUN_D_OUT + k] = 0.0f;
        batch_t[r * RUN_D_OUT + RUN_LABELS[rows[r]]] = 1.0f;
    }
}


__attribute__((noinline)) static int run(void)
{
    put("aifes-harness 1\n");
    TIMER0_RELOAD = 0xFFFFFFFFu;
    TIMER0_VALUE = 0xFFFFFFFFu;
    TIMER0_CTRL = 1; /* enable; no external input, no interrupt */
#ifndef BASELINE
    aimodel_t model;
    ailayer_t *x;
#if RUN_MODEL_CNN == 2
    /* A length-40 signal as a [1, 40] image, channels first: [batch, 1, 1, 40]. AIfES has no
       conv1d; PyTorch's Conv1d(c_in, c_out, k, stride 2, padding 1) is its conv2d with a 1 x k
       kernel, stride (1, 2), dilation (1, 1), zero padding (0, 1) (AIfES's padding is
       symmetric per axis, as PyTorch's): the output width floor((w + 2 - k) / 2) + 1 on both
       sides (40 -> 19 -> 10 -> 5), the height stays 1. */
    uint16_t input_layer_shape[] = {RUN_BATCH, 1, 1, RUN_D_IN};
    ailayer_input_f32_t input_layer = AILAYER_INPUT_F32_A(4, input_layer_shape);
    ailayer_conv2d_f32_t conv_1 = AILAYER_CONV2D_F32_A(25, HW(1, 5), HW(1, 2), HW(1, 1), HW(0, 1));
    ailayer_relu_f32_t relu_1 = AILAYER_RELU_F32_A();
    ailayer_conv2d_f32_t conv_2 = AILAYER_CONV2D_F32_A(25, HW(1, 3), HW(1, 2), HW(1, 1), HW(0, 1));
    ailayer_relu_f32_t relu_2 = AILAYER_RELU_F32_A();
    ailayer_conv2d_f32_t conv_3 = AILAYER_CONV2D_F32_A(25, HW(1, 3), HW(1, 2), HW(1, 1), HW(0, 1));
    ailayer_relu_f32_t relu_3 = AILAYER_RELU_F32_A();
    ailayer_flatten_f32_t flatten = AILAYER_FLATTEN_F32_A();
    ailayer_dense_f32_t dense = AILAYER_DENSE_F32_A(RUN_D_OUT);
    ailayer_softmax_f32_t softmax = AILAYER_SOFTMAX_F32_A();
    model.input_layer = ailayer_input_f32_default(&input_layer);
    /* Weights [c_out, c_in, 1, k]: PyTorch's [c_out, c_in, k] in the same order. */
    x = ailayer_conv2d_chw_f32_default(&conv_1, model.input_layer);
    x = ailayer_relu_f32_default(&relu_1, x);
    x = ailayer_conv2d_chw_f32_default(&conv_2, x);
    x = ailayer_relu_f32_default(&relu_2, x);
    x = ailayer_conv2d_chw_f32_default(&conv_3, x);
    x = ailayer_relu_f32_default(&relu_3, x);
    /* [batch, 25, 1, 5] -> [batch, 125] in memory order: PyTorch's flatten of [c, w]. */
    x = ailayer_flatten_f32_default(&flatten, x);
    x = ailayer_dense_f32_default(&dense, x);
    x = ailayer_softmax_f32_default(&softmax, x);
#elif RUN_MODEL_CNN
    uint16_t input_layer_shape[] = {RUN_BATCH, 1, RUN_SIDE, RUN_SIDE};
    ailayer_input_f32_t input_layer = AILAYER_INPUT_F32_A(4, input_layer_shape);
    /* PyTorch's Conv2d(c_in, c_out, 3, padding 1): stride 1, dilation 1, zero padding 1 on
       every side; AIfES's conv2d is a cross-correlation, as PyTorch's. */
    ailayer_conv2d_f32_t conv_1 = AILAYER_CONV2D_F32_A(RUN_C1, HW(3, 3), HW(1, 1), HW(1, 1), HW(1, 1));
    ailayer_relu_f32_t relu_1 = AILAYER_RELU_F32_A();
    ailayer_maxpool2d_f32_t pool_1 = AILAYER_MAXPOOL2D_F32_A(HW(2, 2), HW(2, 2), HW(0, 0));
    ailayer_conv2d_f32_t conv_2 = AILAYER_CONV2D_F32_A(RUN_C2, HW(3, 3), HW(1, 1), HW(1, 1), HW(1, 1));
    ailayer_relu_f32_t relu_2 = AILAYER_RELU_F32_A();
    ailayer_maxpool2d_f32_t pool_2 = AILAYER_MAXPOOL2D_F32_A(HW(2, 2), HW(2, 2), HW(0, 0));
    ailayer_flatten_f32_t flatten = AILAYER_FLATTEN_F32_A();
    ailayer_dense_f32_t dense = AILAYER_DENSE_F32_A(RUN_D_OUT);
    ailayer_softmax_f32_t softmax = AILAYER_SOFTMAX_F32_A();
    model.input_layer = ailayer_input_f32_default(&input_layer);
    /* Channels first ([batch, c, h, w], tapeplan's layout): weights [c_out, c_in, k_h, k_w]. */
    x = ailayer_conv2d_chw_f32_default(&conv_1, model.input_layer);
    x = ailayer_relu_f32_default(&relu_1, x);
    x = ailayer_maxpool2d_chw_f32_default(&pool_1, x);
    x = ailayer_conv2d_chw_f32_default(&conv_2, x);
    x = ailayer_relu_f32_default(&relu_2, x);
    x = ailayer_maxpool2d_chw_f32_default(&pool_2, x);
    x = ailayer_flatten_f32_default(&flatten, x);
    x = ailayer_dense_f32_default(&dense, x);
    x = ailayer_softmax_f32_default(&softmax, x);
#else
    uint16_t input_layer_shape[] = {RUN_BATCH, RUN_D_IN};
    ailayer_input_f32_t input_layer = AILAYER_INPUT_F32_A(2, input_layer_shape);
    ailayer_dense_f32_t dense_1 = AILAYER_DENSE_F32_A(RUN_HIDDEN);
    ailayer_tanh_f32_t tanh_1 = AILAYER_TANH_F32_A();
    ailayer_dense_f32_t dense_2 = AILAYER_DENSE_F32_A(RUN_D_OUT);
    ailayer_softmax_f32_t softmax_2 = AILAYER_SOFTMAX_F32_A();
    model.input_layer = ailayer_input_f32_default(&input_layer);
    x = ailayer_dense_f32_default(&dense_1, model.input_layer);
    x = ailayer_tanh_f32_default(&tanh_1, x);
    x = ailayer_dense_f32_default(&dense_2, x);
    x = ailayer_softmax_f32_default(&softmax_2, x);
#endif
    ailoss_crossentropy_f32_t ce;
    model.output_layer = x;
    /* The mean over the batch, as tapeplan's loss=ce: the deltas are scaled by 1/batch. */
    model.loss = ailoss_crossentropy_mean_f32_default(&ce, model.output_layer);
    if (aialgo_compile_model(&model) != 0) return 1;
    uint32_t parameter_bytes = aialgo_sizeof_parameter_memory(&model);
    if (parameter_bytes > sizeof parameter_memory) return 2;
    aialgo_distribute_parameter_memory(&model, parameter_memory, parameter_bytes);
    /* The planner's initial parameters in AIfES's layouts, tensor after tensor. */
#if RUN_MODEL_CNN == 2
    aitensor_t *params[] = {&conv_1.weights, &conv_1.bias, &conv_2.weights, &conv_2.bias, &conv_3.weights, &conv_3.bias, &dense.weights, &dense.bias};
#elif RUN_MODEL_CNN
    aitensor_t *params[] = {&conv_1.weights, &conv_1.bias, &conv_2.weights, &conv_2.bias, &dense.weights, &dense.bias};
#else
    /* w1 [64, 32] b1 [32] w2 [32, 10] b2 [10]: AIfES's dense weights are [inputs, neurons]
       (y = x W + b), the planner's MLP layout. */
    aitensor_t *params[] = {&dense_1.weights, &dense_1.bias, &dense_2.weights, &dense_2.bias};
#endif
    const uint32_t n_params = sizeof params / sizeof params[0];
    uint32_t at = 0;
    for (uint32_t p = 0; p < n_params; p++) {
        float *d = (float *)params[p]->data;
        for (uint32_t i = 0; i < aimath_tensor_elements(params[p]); i++) d[i] = bits_f32(RUN_INIT_BITS[at++]);
    }
    if (at != RUN_PARAMS) return 6;
#if RUN_ADAM
    /* PyTorch's Adam hyperparameters, tapeplan's (AIfES adds eps to the uncorrected sqrt(v)). */
    aiopti_adam_f32_t adam = AIOPTI_ADAM_F32(RUN_LR, 0.9f, 0.999f, 1e-8f);
    aiopti_t *optimizer = aiopti_adam_f32_default(&adam);
#else
    aiopti_sgd_f32_t sgd = AIOPTI_SGD_F32(RUN_LR);
    aiopti_t *optimizer = aiopti_sgd_f32_default(&sgd);
#endif
    uint32_t training_bytes = aialgo_sizeof_training_memory(&model, optimizer);
    if (training_bytes > sizeof training_memory) return 3;
    aialgo_schedule_training_memory(&model, optimizer, training_memory, training_bytes);
    aialgo_init_model_for_training(&model, optimizer);
#if RUN_MODEL_CNN == 2
    uint16_t x_shape[] = {RUN_BATCH, 1, 1, RUN_D_IN};
    aitensor_t x_tensor = AITENSOR_4D_F32(x_shape, batch_x);
#elif RUN_MODEL_CNN
    uint16_t x_shape[] = {RUN_BATCH, 1, RUN_SIDE, RUN_SIDE};
    aitensor_t x_tensor = AITENSOR_4D_F32(x_shape, batch_x);
#else
    uint16_t x_shape[] = {RUN_BATCH, RUN_D_IN};
    aitensor_t x_tensor = AITENSOR_2D_F32(x_shape, batch_x);
#endif
    uint16_t t_shape[] = {RUN_BATCH, RUN_D_OUT};
    aitensor_t t_tensor = AITENSOR_2D_F32(t_shape, batch_t);
#else
    uint32_t parameter_bytes = 0, training_bytes = 0;
#endif
    put_line("mem parameter_bytes", parameter_bytes, 0, 0, 0);
    put_line("mem training_bytes", training_bytes, 0, 0, 0);
    put_line("mem batch_bytes", (uint32_t)(sizeof batch_x + sizeof batch_t), 0, 0, 0);
    uint32_t step = 0;
    for (uint32_t e = 0; e < RUN_EPOCHS; e++) {
        uint64_t epoch_ticks = 0;
        for (uint32_t s = 0; s < RUN_STEPS_PER_EPOCH; s++) {
            load_batch(&RUN_ORDER[e * RUN_SAMPLES + s * RUN_BATCH]);
            float loss = 0.0f;
#ifndef BASELINE
            if (aialgo_calc_loss_model_f32(&model, &x_tensor, &t_tensor, &loss) != 0) return 4;
            uint32_t t0 = ticks_now();
            if (aialgo_train_model(&model, &x_tensor, &t_tensor, optimizer, RUN_BATCH) != 0) return 5;
            uint32_t t1 = ticks_now();
#else
            uint32_t t0 = ticks_now(), t1 = ticks_now();
#endif
            epoch_ticks += (uint32_t)(t1 - t0);
            step++;
            put_line("loss", step, 1, f32_bits(loss), 1);
        }
        if (epoch_ticks > 0xFFFFFFFFu) return 7; /* more than the report's 32 bits */
        put_line("epoch_ticks", e + 1, 0, (uint32_t)epoch_ticks, 1);
    }
#ifndef BASELINE
    at = 0;
    for (uint32_t p = 0; p < n_params; p++) {
        const float *d = (const float *)params[p]->data;
        for (uint32_t i = 0; i < aimath_tensor_elements(params[p]); i++, at++) put_line("param", at, 1, f32_bits(d[i]), 1);
    }
#endif
    return 0;
}

int main(void)
{
    paint_stack();
    int failed = run();
    if (failed) put_kv("error", (uint32_t)failed);
    put_kv("stack_bytes", stack_high_water_bytes());
    put("end\n");
    exit_with(failed);
}

/* ---- reset and vectors ---- */
__attribute__((noreturn)) void reset_handler(void)
{
    uint32_t *src = &_sidata;
    for (uint32_t *d = &_sdata; d < &_edata;) *d++ = *src++;
    for (uint32_t *d = &_sbss; d < &_ebss;) *d++ = 0;
    /* CP10 and CP11 full access: the FPU on, before any floating-point code. */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n isb" ::: "memory");
    main();
    exit_with(1);
}

__attribute__((noreturn)) static void fault_handler(void)
{
    put("error fault\n");
    exit_with(1);
}

__attribute__((section(".vector_table"), used)) static const void *const vectors[16] = {
    &_stack_top, (const void *)reset_handler, (const void *)fault_handler, (const void *)fault_handler,
    (const void *)fault_handler, (const void *)fault_handler, (const void *)fault_handler, 0, 0, 0, 0,
    (const void *)fault_handler, (const void *)fault_handler, 0, (const void *)fault_handler,
    (const void *)fault_handler,
};
