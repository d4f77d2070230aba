/* The seven backoff strategies of redis.backoff, as C heap types.
 *
 * Every compute() has two paths that give the same result, and a direct
 * path in front of them for the common call (compute(n), n a small int,
 * float cap and base; see "The direct path" below), which gives the fast
 * path's double without asking for the module state or owning a field:
 *
 * - a fast path in doubles, taken when the parameters are floats (or small
 *   ints, where only compared) and the failure count is an int, bool or
 *   float.  It performs redis-py's operations in redis-py's order, so the
 *   delays are bit-identical (the build forbids fused multiply-add);
 * - a generic path that performs the same formula with Python's number
 *   protocol, for any other real number (Decimal, Fraction, int bases, a
 *   replaced random.uniform...), so results are equal wherever redis-py
 *   returns one.
 *
 * base * 2**failures follows the rule of the installed redis-py, read once
 * when the module is executed (it imports redis.backoff there anyway):
 *
 * - redis-py 8.0 and 8.1 compute base * 2**failures with Python numbers.
 *   Both paths replace their OverflowError for failure counts >= 1024 by
 *   the formula's value: base * 2**failures is then past any float cap.
 * - redis-py 8.2 has redis.backoff._exponential(x, failures):
 *   math.ldexp(x, failures), math.inf where that raises OverflowError.  The
 *   C types then do exactly that (ldexp_rule below), so huge counts are
 *   capped by redis-py itself and there is nothing to improve.
 */
#include "strategies.h"
#include "args.h"
#include "random_source.h"
#include "slots.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *backoff;
} ConstantObject;

/* Exponential, FullJitter, EqualJitter, ExponentialWithJitter. */
typedef struct {
    PyObject_HEAD
    PyObject *cap;
    PyObject *base;
} CappedObject;

typedef struct {
    CappedObject capped;
    PyObject *previous; /* _previous_backoff */
} DecorrelatedObject;

#define CONSTANT(op) ((ConstantObject *)(op))
#define CAPPED(op) ((CappedObject *)(op))
#define DECORRELATED(op) ((DecorrelatedObject *)(op))

/* pow() through a pointer the compiler cannot see through, so that no
 * optimiser rewrites pow(2.0, x) as exp2(x): Python's float ** calls the C
 * library's pow, and so do we. */
static double (*const volatile libm_pow)(double, double) = pow;

/* ---------------------------------------------------------------------- */
/* Numbers                                                                */

/* The value of a parameter as a double when that is exact: a float, or an
 * int small enough that every comparison and product with it is exact. */
static inline int
exact_double(PyObject *obj, double *out)
{
    if (PyFloat_CheckExact(obj)) {
        *out = PyFloat_AS_DOUBLE(obj);
        return 1;
    }
    if (PyLong_CheckExact(obj)) {
        int overflow;
        long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow == 0 && value <= (1LL << 50) && value >= -(1LL << 50)) {
            *out = (double)value;
            return 1;
        }
    }
    return 0;
}

/* x * 2**n once 2**n is past the largest float: what the formula gives,
 * where redis-py raises OverflowError. */
static inline double
times_huge_power(double x)
{
    if (x > 0) {
        return HUGE_VAL;
    }
    if (x < 0) {
        return -HUGE_VAL;
    }
    return x; /* 0.0, -0.0 or nan */
}

/* 2.0**n for -1022 <= n <= 1023, a normal float: exponent bits only. */
static inline double
normal_power_of_two(int n)
{
    uint64_t bits = (uint64_t)(n + 1023) << 52;
    double value;
    memcpy(&value, &bits, sizeof(value));
    return value;
}

/* n when `count` is an exact int (not a bool, not a subclass) in
 * [-1022, 1023], the counts for which 2**n is a normal float. */
static inline int
small_exponent(PyObject *count, int *n)
{
    long long value;
    if (!PyLong_CheckExact(count) || !rbc_small_int_value(count, &value) || value < -1022
        || value > 1023) {
        return 0;
    }
    *n = (int)value;
    return 1;
}

/* x * 2**n for -1022 <= n <= 1023, when it is finite: then redis-py 8.0
 * and 8.1's Python numbers (an exact power of two, a float operand, one
 * rounding) and 8.2's math.ldexp (one rounding, x itself for a zero) give
 * this same double, and which release is installed need not be asked.  0
 * for an infinite or NaN product, where the rules part (8.2's
 * _exponential gives +inf where ldexp overflows, of either sign). */
static inline int
direct_scaled(double x, int n, double *out)
{
    *out = x * normal_power_of_two(n);
    return isfinite(*out);
}

/* 2.0 ** f as Python's float power computes it (for finite f below 1024). */
static inline double
float_power_of_two(double f)
{
    if (f == 0.0) {
        return 1.0;
    }
    if (isnan(f)) {
        return f;
    }
    if (isinf(f)) {
        return f > 0 ? f : 0.0;
    }
    return libm_pow(2.0, f);
}

/* x * 2**failures in doubles, as Python computes it when x is a float.
 * Returns 1 with *out set, or 0 when failures is not an exact int, bool or
 * float and the caller must take the generic path. */
static inline int
scale_by_power_of_two(double x, PyObject *failures, double *out)
{
    if (PyLong_CheckExact(failures) || PyBool_Check(failures)) {
        int overflow = 0;
        long long n;
        if (!rbc_small_int_value(failures, &n)) {
            n = PyLong_AsLongLongAndOverflow(failures, &overflow);
        }
        if (overflow == 0 && n >= -1022 && n < 1024) {
            /* 2**n is an exact int (a float for n < 0: pow(2.0, n), exact
             * here), converted exactly to a float: build it from its bits. */
            *out = x * normal_power_of_two((int)n);
        }
        else if (overflow > 0 || n >= 1024) {
            *out = times_huge_power(x);
        }
        else {
            /* 2**n for n < 0 is pow(2.0, n): exact, or 0.0 below -1074. */
            if (overflow < 0 || n < -1100) {
                n = -1100;
            }
            *out = x * ldexp(1.0, (int)n);
        }
        return 1;
    }
    if (PyFloat_CheckExact(failures)) {
        double f = PyFloat_AS_DOUBLE(failures);
        if (isfinite(f) && f >= 1024.0) {
            *out = times_huge_power(x);
        }
        else {
            *out = x * float_power_of_two(f);
        }
        return 1;
    }
    return 0;
}

static int
check_failures(PyObject *failures)
{
    return rbc_check_real("compute", "failures", failures);
}

/* min(a, b) and max(a, b) as the builtins choose: the first argument
 * unless the second compares strictly less (greater).  New reference. */
static PyObject *
py_min(PyObject *a, PyObject *b)
{
    int less = PyObject_RichCompareBool(b, a, Py_LT);
    return less < 0 ? NULL : Py_NewRef(less ? b : a);
}

static PyObject *
py_max(PyObject *a, PyObject *b)
{
    int greater = PyObject_RichCompareBool(b, a, Py_GT);
    return greater < 0 ? NULL : Py_NewRef(greater ? b : a);
}

/* Failure counts from which an exact base * 2**failures is not built when
 * the cap is sure to win anyway: 2**16384 times any base the check below
 * admits is past every finite float. */
#define HUGE_FAILURES 16384.0

/* Failure counts from which Python could not build 2**failures at all
 * (gigabytes of digits, for minutes): the formula's value is given. */
#define ENORMOUS_FAILURES 2147483648.0

/* For an int or Fraction count (whose 2**failures Python builds as an
 * exact int): 2 when failures >= ENORMOUS_FAILURES, 1 when it is at least
 * HUGE_FAILURES, else 0 (also for any other type: Python's ** is cheap
 * there, or raises by itself); -1 on error. */
static int
failures_magnitude(rbc_state *st, PyObject *failures)
{
    double value;
    if (PyLong_Check(failures)) {
        int overflow;
        long long n = PyLong_AsLongLongAndOverflow(failures, &overflow);
        if (n == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow != 0) {
            return overflow > 0 ? 2 : 0;
        }
        value = (double)n;
    }
    else if (PyObject_TypeCheck(failures, st->strategies.fraction_type)) {
        PyObject *as_float = PyNumber_Float(failures);
        if (as_float == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
                return -1;
            }
            PyErr_Clear(); /* past the float range, of either sign */
            int positive = PyObject_RichCompareBool(failures, st->common.int_zero, Py_GT);
            return positive < 0 ? -1 : 2 * positive;
        }
        value = PyFloat_AS_DOUBLE(as_float);
        Py_DECREF(as_float);
    }
    else {
        return 0;
    }
    if (value >= ENORMOUS_FAILURES) {
        return 2;
    }
    return value >= HUGE_FAILURES ? 1 : 0;
}

/* 1 when min(cap, x * 2**failures), failures >= HUGE_FAILURES, is surely
 * the cap: the cap is a finite float value and x an int, bool or Fraction
 * of at least 2**-1000, so the product is past 2**15384.  Compares
 * magnitudes instead of building the power.  A Decimal x is left to
 * Python: its context may raise decimal.Overflow there.  0 otherwise;
 * never fails (a conversion error only means "not sure"). */
static int
surely_capped(rbc_strategies_state *ss, PyObject *cap, PyObject *x)
{
    if (!(PyLong_Check(x) || PyObject_TypeCheck(x, ss->fraction_type))) {
        return 0;
    }
    double cap_value = PyFloat_AsDouble(cap);
    if (cap_value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    double x_value = PyFloat_AsDouble(x);
    if (x_value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return isfinite(cap_value) && isfinite(x_value) && x_value >= 0x1p-1000;
}

/* x * 2**failures when 2**failures is past every float: the formula's
 * value. */
static PyObject *
scaled_out_of_range(PyObject *x)
{
    int is_zero = PyObject_Not(x);
    if (is_zero < 0) {
        return NULL;
    }
    if (is_zero) {
        return Py_NewRef(x); /* 0 * 2**failures is that same zero */
    }
    double x_value = PyFloat_AsDouble(x);
    if (x_value == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    return PyFloat_FromDouble(times_huge_power(x_value));
}

/* x * 2**failures with Python objects: redis-py's expression, except that
 * where it raises OverflowError (a float operand meeting 2**failures past
 * the float range), or could never build 2**failures, the result is the
 * formula's value. */
static PyObject *
generic_scaled(rbc_state *st, PyObject *x, PyObject *failures, int magnitude)
{
    if (magnitude == 2 || (magnitude == 1 && PyFloat_Check(x))) {
        /* Python: float * huge int is an OverflowError; an enormous power
         * is never built. */
        return scaled_out_of_range(x);
    }
    PyObject *product = NULL;
    PyObject *power = PyNumber_Power(st->strategies.int_two, failures, Py_None);
    if (power != NULL) {
        product = PyNumber_Multiply(x, power);
        Py_DECREF(power);
    }
    if (product != NULL || !PyErr_ExceptionMatches(PyExc_OverflowError)) {
        return product;
    }
    /* A float operand met 2**failures past the float range: for a negative
     * count Python's 2**failures is a float and cannot overflow. */
    PyErr_Clear();
    return scaled_out_of_range(x);
}

/* min(cap, x * 2**failures) with Python objects (redis-py 8.0 and 8.1),
 * with the cap object itself, without any power, where it surely wins. */
static PyObject *
generic_capped_power(rbc_state *st, PyObject *cap, PyObject *x, PyObject *failures)
{
    if (check_failures(failures) < 0) {
        return NULL;
    }
    int magnitude = failures_magnitude(st, failures);
    if (magnitude < 0) {
        return NULL;
    }
    if (magnitude == 1 && surely_capped(&st->strategies, cap, x)) {
        return Py_NewRef(cap);
    }
    PyObject *scaled = generic_scaled(st, x, failures, magnitude);
    if (scaled == NULL) {
        return NULL;
    }
    PyObject *result = py_min(cap, scaled);
    Py_DECREF(scaled);
    return result;
}

/* ---------------------------------------------------------------------- */
/* redis-py 8.2's rule: _exponential(x, failures)                          */

/* math.ldexp(x, n) for an int n (clamped to the range of a C int, as
 * CPython's math_ldexp does), with _exponential's +inf wherever ldexp
 * raises OverflowError: a result past the float range, of either sign. */
static inline double
ldexp_or_infinity(double x, long long n)
{
    if (x == 0.0 || !isfinite(x)) {
        return x; /* math.ldexp returns zeros, infinities and NaNs as they are */
    }
    if (n > INT_MAX) {
        return HUGE_VAL; /* overflow for any finite non-zero x */
    }
    if (n < INT_MIN) {
        n = INT_MIN; /* underflow: ldexp gives the zero of x's sign */
    }
    double r;
    if (n >= -1022 && n <= 1023) {
        /* 2**n is a normal float and the product is rounded once, as
         * ldexp rounds: the same double, without the call into libm. */
        r = x * normal_power_of_two((int)n);
    }
    else {
        r = ldexp(x, (int)n);
    }
    return isinf(r) ? HUGE_VAL : r;
}

/* _exponential(x, failures) in doubles when failures is an exact int or
 * bool of one digit, read inline.  Returns 1 with *out set, or 0 when the
 * generic path must decide (any other count, a huge int included). */
static inline int
exponential_ldexp_double(double x, PyObject *failures, double *out)
{
    long long n;
    if (!((PyLong_CheckExact(failures) || PyBool_Check(failures))
          && rbc_small_int_value(failures, &n))) {
        return 0;
    }
    *out = ldexp_or_infinity(x, n);
    return 1;
}

/* _exponential(x, failures) with objects, in math.ldexp's order: x through
 * the float protocol first (an OverflowError there, from a huge int, is
 * caught by _exponential as well: +inf), then failures must be an int (a
 * subclass too: its value is read without calling __index__).  A new float. */
static PyObject *
generic_exponential_ldexp(PyObject *x, PyObject *failures)
{
    double x_value = PyFloat_AsDouble(x);
    if (x_value == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return NULL;
        }
        PyErr_Clear();
        return PyFloat_FromDouble(HUGE_VAL);
    }
    if (!PyLong_Check(failures)) {
        PyErr_Format(PyExc_TypeError, "compute() argument 'failures' must be int, not %.200s",
                     Py_TYPE(failures)->tp_name);
        return NULL;
    }
    int overflow;
    long long n = PyLong_AsLongLongAndOverflow(failures, &overflow);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow != 0) {
        /* Past every C int: ldexp_or_infinity clamps these alike. */
        n = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    }
    return PyFloat_FromDouble(ldexp_or_infinity(x_value, n));
}

/* ---------------------------------------------------------------------- */
/* The rule of the installed redis-py                                      */

/* x * 2**failures (8.0, 8.1) or _exponential(x, failures) (8.2) in doubles;
 * 0 when the generic path must decide. */
static inline int
exponential_double(const rbc_strategies_state *ss, double x, PyObject *failures, double *out)
{
    int n;
    if (small_exponent(failures, &n) && direct_scaled(x, n, out)) {
        return 1; /* the rules agree */
    }
    if (ss->ldexp_rule) {
        return exponential_ldexp_double(x, failures, out);
    }
    return scale_by_power_of_two(x, failures, out);
}

/* The same with objects.  New reference. */
static PyObject *
generic_exponential(rbc_state *st, PyObject *x, PyObject *failures)
{
    if (st->strategies.ldexp_rule) {
        return generic_exponential_ldexp(x, failures);
    }
    if (check_failures(failures) < 0) {
        return NULL;
    }
    int magnitude = failures_magnitude(st, failures);
    if (magnitude < 0) {
        return NULL;
    }
    return generic_scaled(st, x, failures, magnitude);
}

/* min(cap, exponential(x, failures)) with objects.  New reference. */
static PyObject *
generic_capped_exponential(rbc_state *st, PyObject *cap, PyObject *x, PyObject *failures)
{
    if (!st->strategies.ldexp_rule) {
        return generic_capped_power(st, cap, x, failures);
    }
    PyObject *scaled = generic_exponential_ldexp(x, failures);
    if (scaled == NULL) {
        return NULL;
    }
    PyObject *result = py_min(cap, scaled);
    Py_DECREF(scaled);
    return result;
}

/* A float, int or Fraction: random.uniform's arithmetic on it is the same
 * in doubles (each operand meets a float, which converts it). */
static inline int
is_float_like(rbc_strategies_state *ss, PyObject *obj)
{
    return PyFloat_Check(obj) || PyLong_Check(obj) || PyObject_TypeCheck(obj, ss->fraction_type);
}

/* a + (b - a) * random() with objects, the draw from the fast generator:
 * random.uniform's own operations, so a Decimal bound raises the TypeError
 * random.uniform raises (after its draw, as there). */
static PyObject *
uniform_with_objects(rbc_state *st, PyObject *a, PyObject *b)
{
    PyObject *result = NULL, *width = NULL, *draw = NULL, *scaled = NULL;
    width = PyNumber_Subtract(b, a);
    if (width == NULL) {
        goto error;
    }
    draw = PyFloat_FromDouble(rbc_xoshiro_double(st->random.xoshiro));
    if (draw == NULL) {
        goto error;
    }
    scaled = PyNumber_Multiply(width, draw);
    if (scaled == NULL) {
        goto error;
    }
    result = PyNumber_Add(a, scaled);
error:
    Py_XDECREF(width);
    Py_XDECREF(draw);
    Py_XDECREF(scaled);
    return result;
}

/* random.uniform(a, b) with objects: through the random module, or from the
 * fast generator when that is the active source. */
static PyObject *
generic_uniform(rbc_state *st, PyObject *a, PyObject *b)
{
    if (!st->random.use_fast) {
        return rbc_random_call_uniform(&st->random, a, b);
    }
    if (!(is_float_like(&st->strategies, a) && is_float_like(&st->strategies, b))) {
        return uniform_with_objects(st, a, b);
    }
    double a_value = PyFloat_AsDouble(a), b_value, out;
    if (a_value == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    b_value = PyFloat_AsDouble(b);
    if (b_value == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (rbc_random_uniform(&st->random, a_value, b_value, &out) < 0) {
        return NULL;
    }
    return PyFloat_FromDouble(out);
}

/* The upper bound of a jittered draw, made safe for the float arithmetic of
 * random.uniform and of `/ 2`: an int or Fraction bound past the float
 * range (base * 2**failures with a negative or exact base, an infinite or
 * exact cap) is the float infinity of its sign, what the formula gives in
 * floats, where Python would raise OverflowError.  Any other bound is kept
 * as it is.  New reference. */
static PyObject *
bound_in_float_range(rbc_state *st, PyObject *high)
{
    double value;
    if (PyLong_Check(high)) {
        value = PyLong_AsDouble(high);
    }
    else if (PyObject_TypeCheck(high, st->strategies.fraction_type)) {
        PyObject *as_float = PyNumber_Float(high);
        if (as_float != NULL) {
            Py_DECREF(as_float);
            return Py_NewRef(high);
        }
        value = -1.0;
    }
    else {
        return Py_NewRef(high);
    }
    if (!(value == -1.0 && PyErr_Occurred())) {
        return Py_NewRef(high);
    }
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
        return NULL;
    }
    PyErr_Clear();
    int positive = PyObject_RichCompareBool(high, st->common.int_zero, Py_GT);
    if (positive < 0) {
        return NULL;
    }
    return PyFloat_FromDouble(positive ? HUGE_VAL : -HUGE_VAL);
}

/* uniform(a, b) from doubles, falling back to a replaced random.uniform
 * called with the objects redis-py passes: a_obj, and b_obj or b as a float. */
static PyObject *
uniform_from_doubles(rbc_state *st, PyObject *a_obj, double a, PyObject *b_obj, double b)
{
    double out;
    int status = rbc_random_uniform(&st->random, a, b, &out);
    if (status == 0) {
        return PyFloat_FromDouble(out);
    }
    if (status < 0) {
        return NULL;
    }
    PyObject *b_arg = b_obj != NULL ? Py_NewRef(b_obj) : PyFloat_FromDouble(b);
    if (b_arg == NULL) {
        return NULL;
    }
    PyObject *result = rbc_random_call_uniform(&st->random, a_obj, b_arg);
    Py_DECREF(b_arg);
    return result;
}

/* ---------------------------------------------------------------------- */
/* compute()                                                               */

/* Below, exponential(x, failures) is x * 2**failures under redis-py 8.0
 * and 8.1, _exponential(x, failures) under 8.2 (see the top of the file). */

static PyObject *
compute_exponential(rbc_state *st, PyObject *cap, PyObject *base, PyObject *failures)
{
    double cap_value, product;
    if (PyFloat_CheckExact(base) && exact_double(cap, &cap_value)
        && exponential_double(&st->strategies, PyFloat_AS_DOUBLE(base), failures, &product)) {
        /* min(cap, exponential(base, failures)) */
        return product < cap_value ? PyFloat_FromDouble(product) : Py_NewRef(cap);
    }
    return generic_capped_exponential(st, cap, base, failures);
}

/* min(cap, exponential(base, failures)) as a double, when the fast path
 * applies.  *chosen_cap tells whether the cap object itself is the minimum. */
static inline int
capped_scaled_double(const rbc_strategies_state *ss, PyObject *cap, PyObject *base,
                     PyObject *failures, double *out, int *chosen_cap)
{
    double cap_value, product;
    if (!(PyFloat_CheckExact(base) && exact_double(cap, &cap_value)
          && exponential_double(ss, PyFloat_AS_DOUBLE(base), failures, &product))) {
        return 0;
    }
    *chosen_cap = !(product < cap_value);
    *out = *chosen_cap ? cap_value : product;
    return 1;
}

static PyObject *
compute_full_jitter(rbc_state *st, PyObject *cap, PyObject *base, PyObject *failures)
{
    /* uniform(0, min(cap, exponential(base, failures))) */
    double high;
    int chosen_cap;
    if (capped_scaled_double(&st->strategies, cap, base, failures, &high, &chosen_cap)) {
        return uniform_from_doubles(st, st->common.int_zero, 0.0,
                                    chosen_cap ? cap : NULL, high);
    }
    PyObject *exact_high = generic_capped_exponential(st, cap, base, failures);
    if (exact_high == NULL) {
        return NULL;
    }
    /* Under 8.0 and 8.1 an exact bound past the float range makes
     * random.uniform raise OverflowError: the formula's value instead. */
    PyObject *high_obj = st->strategies.ldexp_rule
                             ? Py_NewRef(exact_high)
                             : bound_in_float_range(st, exact_high);
    Py_DECREF(exact_high);
    if (high_obj == NULL) {
        return NULL;
    }
    PyObject *result = generic_uniform(st, st->common.int_zero, high_obj);
    Py_DECREF(high_obj);
    return result;
}

/* high / 2 for EqualJitterBackoff.  Under 8.0 and 8.1, where Python would
 * raise OverflowError (an int quotient past the float range, or a Fraction
 * one reaching random.uniform), the formula's value in floats: the
 * infinity of its sign.  A bound of 2**1024 keeps its finite half, as in
 * Python.  New reference. */
static PyObject *
half_in_float_range(rbc_state *st, PyObject *high)
{
    rbc_strategies_state *ss = &st->strategies;
    PyObject *half = PyNumber_TrueDivide(high, ss->int_two);
    if (ss->ldexp_rule) {
        return half;
    }
    if (half == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return NULL;
        }
        PyErr_Clear();
        PyObject *bound = bound_in_float_range(st, high);
        if (bound == NULL) {
            return NULL;
        }
        half = PyNumber_TrueDivide(bound, ss->int_two);
        Py_DECREF(bound);
        return half;
    }
    PyObject *result = bound_in_float_range(st, half);
    Py_DECREF(half);
    return result;
}

static PyObject *
compute_equal_jitter(rbc_state *st, PyObject *cap, PyObject *base, PyObject *failures)
{
    /* temp = min(cap, exponential(base, failures)) / 2; temp + uniform(0, temp) */
    double high;
    int chosen_cap;
    PyObject *temp_obj;
    if (capped_scaled_double(&st->strategies, cap, base, failures, &high, &chosen_cap)) {
        double temp = high / 2.0, jitter;
        int status = rbc_random_uniform(&st->random, 0.0, temp, &jitter);
        if (status == 0) {
            return PyFloat_FromDouble(temp + jitter);
        }
        if (status < 0) {
            return NULL;
        }
        temp_obj = PyFloat_FromDouble(temp);
    }
    else {
        PyObject *high_obj = generic_capped_exponential(st, cap, base, failures);
        if (high_obj == NULL) {
            return NULL;
        }
        temp_obj = half_in_float_range(st, high_obj);
        Py_DECREF(high_obj);
    }
    if (temp_obj == NULL) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *jitter_obj = generic_uniform(st, st->common.int_zero, temp_obj);
    if (jitter_obj != NULL) {
        result = PyNumber_Add(temp_obj, jitter_obj);
        Py_DECREF(jitter_obj);
    }
    Py_DECREF(temp_obj);
    return result;
}

static PyObject *
compute_exponential_with_jitter(rbc_state *st, PyObject *cap, PyObject *base, PyObject *failures)
{
    /* min(cap, exponential(random.random() * base, failures)) */
    double r, cap_value, product;
    PyObject *r_obj;
    int status = rbc_random_random(&st->random, &r, &r_obj);
    if (status < 0) {
        return NULL;
    }
    if (status == 0) {
        if (PyFloat_CheckExact(base) && exact_double(cap, &cap_value)
            && exponential_double(&st->strategies, r * PyFloat_AS_DOUBLE(base), failures,
                                  &product)) {
            return product < cap_value ? PyFloat_FromDouble(product) : Py_NewRef(cap);
        }
        r_obj = PyFloat_FromDouble(r);
        if (r_obj == NULL) {
            return NULL;
        }
    }
    PyObject *result = NULL;
    PyObject *jittered_base = PyNumber_Multiply(r_obj, base);
    Py_DECREF(r_obj);
    if (jittered_base != NULL) {
        PyObject *scaled = generic_exponential(st, jittered_base, failures);
        Py_DECREF(jittered_base);
        if (scaled != NULL) {
            result = py_min(cap, scaled);
            Py_DECREF(scaled);
        }
    }
    return result;
}

static PyObject *
decorrelated_draw(rbc_state *st, PyObject *cap, PyObject *base, PyObject *previous)
{
    /* max_backoff = max(base, previous * 3)
     * previous = min(cap, uniform(base, max_backoff)); return previous
     * (compute_decorrelated stores it). */
    double cap_value, base_value, previous_value;
    if (exact_double(cap, &cap_value) && exact_double(base, &base_value)
        && exact_double(previous, &previous_value)) {
        double tripled = previous_value * 3.0, temp;
        int tripled_wins = tripled > base_value;
        double high = tripled_wins ? tripled : base_value;
        int status = rbc_random_uniform(&st->random, base_value, high, &temp);
        if (status < 0) {
            return NULL;
        }
        if (status == 0) {
            return temp < cap_value ? PyFloat_FromDouble(temp) : Py_NewRef(cap);
        }
    }
    /* Generic path: Python objects all the way. */
    PyObject *tripled = PyNumber_Multiply(previous, st->strategies.int_three);
    if (tripled == NULL) {
        return NULL;
    }
    PyObject *high = py_max(base, tripled);
    Py_DECREF(tripled);
    if (high == NULL) {
        return NULL;
    }
    PyObject *temp = generic_uniform(st, base, high);
    Py_DECREF(high);
    if (temp == NULL) {
        return NULL;
    }
    PyObject *new_previous = py_min(cap, temp);
    Py_DECREF(temp);
    return new_previous;
}

static PyObject *
compute_decorrelated(rbc_state *st, DecorrelatedObject *self)
{
    /* Own the inputs: the generic path runs Python code (a __mul__, a
     * replaced random.uniform) that may reassign the attributes. */
    PyObject *cap = Py_NewRef(self->capped.cap), *base = Py_NewRef(self->capped.base);
    PyObject *previous = Py_NewRef(self->previous);
    PyObject *new_previous = decorrelated_draw(st, cap, base, previous);
    Py_DECREF(cap);
    Py_DECREF(base);
    Py_DECREF(previous);
    if (new_previous != NULL) {
        Py_XSETREF(self->previous, Py_NewRef(new_previous));
    }
    return new_previous;
}

/* The capped strategies own their parameters for the whole computation,
 * for the same reason. */
typedef PyObject *(*capped_formula)(rbc_state *st, PyObject *cap, PyObject *base,
                                    PyObject *failures);

static inline PyObject *
compute_capped(rbc_state *st, PyObject *self, capped_formula formula, PyObject *failures)
{
    PyObject *cap = Py_NewRef(CAPPED(self)->cap), *base = Py_NewRef(CAPPED(self)->base);
    PyObject *result = formula(st, cap, base, failures);
    Py_DECREF(cap);
    Py_DECREF(base);
    return result;
}

PyObject *
rbc_strategy_compute(rbc_state *st, PyObject *backoff, int kind, PyObject *failures)
{
    switch (kind) {
    case RBC_CONSTANT:
    case RBC_NO_BACKOFF:
        return Py_NewRef(CONSTANT(backoff)->backoff);
    case RBC_EXPONENTIAL:
        return compute_capped(st, backoff, compute_exponential, failures);
    case RBC_FULL_JITTER:
        return compute_capped(st, backoff, compute_full_jitter, failures);
    case RBC_EQUAL_JITTER:
        return compute_capped(st, backoff, compute_equal_jitter, failures);
    case RBC_DECORRELATED_JITTER:
        return compute_decorrelated(st, DECORRELATED(backoff));
    case RBC_EXPONENTIAL_WITH_JITTER:
        return compute_capped(st, backoff, compute_exponential_with_jitter, failures);
    }
    PyErr_SetString(PyExc_SystemError, "unknown backoff strategy kind");
    return NULL;
}

/* DecorrelatedJitterBackoff's reset(): _previous_backoff = 0 (the small
 * int, which PyLong_FromLong never fails to give). */
static void
decorrelated_restart(PyObject *self)
{
    Py_SETREF(DECORRELATED(self)->previous, PyLong_FromLong(0));
}

void
rbc_strategy_reset(rbc_state *st, PyObject *backoff, int kind)
{
    if (kind == RBC_DECORRELATED_JITTER) {
        decorrelated_restart(backoff);
    }
}

/* A field deepcopy() returns as it is: an exact float, int or bool. */
static inline int
atomic_field(PyObject *obj)
{
    return PyFloat_CheckExact(obj) || PyLong_CheckExact(obj) || PyBool_Check(obj);
}

PyObject *
rbc_strategy_atomic_copy(rbc_state *st, PyObject *backoff, int kind)
{
    PyTypeObject *type = Py_TYPE(backoff);
    if (kind == RBC_CONSTANT || kind == RBC_NO_BACKOFF) {
        if (!atomic_field(CONSTANT(backoff)->backoff)) {
            return NULL;
        }
        PyObject *copy = type->tp_alloc(type, 0);
        if (copy == NULL) {
            return NULL;
        }
        CONSTANT(copy)->backoff = Py_NewRef(CONSTANT(backoff)->backoff);
        return copy;
    }
    if (!atomic_field(CAPPED(backoff)->cap) || !atomic_field(CAPPED(backoff)->base)
        || (kind == RBC_DECORRELATED_JITTER
            && !atomic_field(DECORRELATED(backoff)->previous))) {
        return NULL;
    }
    PyObject *copy = type->tp_alloc(type, 0);
    if (copy == NULL) {
        return NULL;
    }
    CAPPED(copy)->cap = Py_NewRef(CAPPED(backoff)->cap);
    CAPPED(copy)->base = Py_NewRef(CAPPED(backoff)->base);
    if (kind == RBC_DECORRELATED_JITTER) {
        DECORRELATED(copy)->previous = Py_NewRef(DECORRELATED(backoff)->previous);
    }
    return copy;
}

/* The compute(failures) method: one positional or keyword argument. */
static const char *const compute_parameters[] = {"failures"};
static const rbc_signature compute_signature = {"compute", compute_parameters, 1, 1};

static inline int
compute_argument(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                 PyObject **failures)
{
    *failures = NULL;
    return rbc_bind(&compute_signature, args, nargs, kwnames, failures);
}

/* What every compute() method does first: bind `failures`, then find the
 * module state.  NULL with an exception set on failure. */
static inline rbc_state *
compute_call_state(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames, PyObject **failures)
{
    if (compute_argument(args, nargs, kwnames, failures) < 0) {
        return NULL;
    }
    return rbc_state_of(self);
}

/* compute() of a capped strategy whose formula is `formula`.  Inlined into
 * each method below with its formula known, so it costs no indirect call. */
static inline PyObject *
capped_compute_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, capped_formula formula)
{
    PyObject *failures;
    rbc_state *st = compute_call_state(self, args, nargs, kwnames, &failures);
    if (st == NULL) {
        return NULL;
    }
    return compute_capped(st, self, formula, failures);
}

/* ---- The direct path: the common call, compute(n) ------------------- */

/* Most calls are compute(n) with n a small int, on a strategy whose cap and
 * base are floats.  Each compute() method tries this path first: it reads
 * the fields without owning them, makes no call that can run Python code
 * while it holds them, finds no module state unless it draws, and hands
 * anything else (a keyword, another count, an int or Decimal parameter, a
 * product that is not finite, a replaced random.uniform or random.random
 * on the default source) to the path above, which does all of it again. */

/* n when the call is compute(n), one positional count that
 * small_exponent() takes. */
static inline int
direct_count(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int *n)
{
    return nargs == 1 && kwnames == NULL && small_exponent(args[0], n);
}

/* min(cap, base * 2**n) as a double for compute(n) on a strategy whose
 * cap and base are exact floats (read, not owned: the caller makes no call
 * that can run Python code before it is done with them).  *cap_wins tells
 * whether the cap object is the minimum. */
static inline int
direct_capped_bound(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    double *out, int *cap_wins)
{
    PyObject *cap = CAPPED(self)->cap, *base = CAPPED(self)->base;
    double product;
    int n;
    if (!(direct_count(args, nargs, kwnames, &n) && PyFloat_CheckExact(cap)
          && PyFloat_CheckExact(base) && direct_scaled(PyFloat_AS_DOUBLE(base), n, &product))) {
        return 0;
    }
    *cap_wins = !(product < PyFloat_AS_DOUBLE(cap)); /* min(): the cap unless less */
    *out = *cap_wins ? PyFloat_AS_DOUBLE(cap) : product;
    return 1;
}

/* The module state behind `self` when its type is exactly the one whose
 * compute is `compute` (the first entry of its method table, which only a
 * type made from this file's spec holds), without the search rbc_state_of
 * makes; NULL (no exception) otherwise, a subclass's instance included:
 * the caller then takes the path above.  From CPython 3.14 each type holds
 * its module's state as its token (the Py_tp_token slot, set where the
 * types are made): one load, and no call, so that the fast source's whole
 * direct path calls nothing before the float it returns.  Before 3.14 the
 * state is asked of the type's module. */
#if PY_VERSION_HEX >= 0x030E0000
#define RBC_STATE_IN_TYPE_TOKEN 1
#endif

static inline rbc_state *
direct_state(PyObject *self, PyCFunction compute)
{
    PyTypeObject *type = Py_TYPE(self);
    if (type->tp_methods == NULL || type->tp_methods[0].ml_meth != compute) {
        return NULL;
    }
#ifdef RBC_STATE_IN_TYPE_TOKEN
    return (rbc_state *)((PyHeapTypeObject *)type)->ht_token;
#else
    PyObject *module = ((PyHeapTypeObject *)type)->ht_module;
    return module == NULL ? NULL : rbc_get_state(module);
#endif
}

#define AS_PYCFUNCTION(f) ((PyCFunction)(void (*)(void))(f))

/* A delay computed on a direct path, as the float compute() returns.  The
 * module keeps one float for this: while nothing but the module holds it
 * (a reference count of one: the caller dropped the last delay it was
 * given), its value is rewritten and it is returned, instead of making a
 * float that the caller then frees, about 60 instructions a call, a third
 * of what compute() costs above the interpreter's floor.  No program can
 * tell: with a count of one no name, container or caller holds the old
 * value, so none can read it or compare with it (CPython's own float
 * arithmetic reuses an operand so from 3.14).  A caller that keeps its
 * delay gets a new float next time, as before.  Not where threads run
 * without the GIL, where another thread may take a reference between the
 * count's read and the write.  (NULL only once the module is cleared.) */
static inline PyObject *
direct_result(rbc_state *st, double value)
{
#ifndef Py_GIL_DISABLED
    PyObject *spare = st->strategies.spare_result;
    if (spare != NULL && Py_REFCNT(spare) == 1) {
        ((PyFloatObject *)spare)->ob_fval = value;
        return Py_NewRef(spare);
    }
#else
    (void)st;
#endif
    return PyFloat_FromDouble(value);
}

static PyObject *
constant_compute(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *failures;
    if (nargs == 1 && kwnames == NULL && PyLong_CheckExact(args[0])) {
        return Py_NewRef(CONSTANT(self)->backoff);
    }
    if (compute_call_state(self, args, nargs, kwnames, &failures) == NULL) {
        return NULL;
    }
    return Py_NewRef(CONSTANT(self)->backoff);
}

/* The general path of a capped strategy, out of line: the direct paths
 * below then make no call but the one that gives their result, and save
 * no register for the rest. */
static Py_NO_INLINE PyObject *
capped_compute_general(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames, capped_formula formula)
{
    return capped_compute_method(self, args, nargs, kwnames, formula);
}

static PyObject *
exponential_compute(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    double delay;
    int cap_wins;
    if (direct_capped_bound(self, args, nargs, kwnames, &delay, &cap_wins)) {
        if (cap_wins) {
            return Py_NewRef(CAPPED(self)->cap);
        }
#ifdef RBC_STATE_IN_TYPE_TOKEN
        /* The state is one load away only here; before 3.14 finding it
         * costs about what the spare float saves. */
        rbc_state *st = direct_state(self, AS_PYCFUNCTION(exponential_compute));
        if (st != NULL) {
            return direct_result(st, delay);
        }
#endif
        return PyFloat_FromDouble(delay);
    }
    return capped_compute_general(self, args, nargs, kwnames, compute_exponential);
}

/* FullJitter's uniform(0, high) (equal 0), or EqualJitter's temp +
 * uniform(0, temp) with temp = high / 2 (equal 1), from the fast source. */
static inline double
uniform_jitter_fast(rbc_random_state *rs, double high, int equal)
{
    double low = equal ? high / 2.0 : 0.0, width = equal ? low : high;
    double jitter = rbc_random_uniform_fast(rs, 0.0, width);
    return equal ? low + jitter : jitter;
}

/* FullJitter and EqualJitter on the default source, and the general path:
 * uniform(0, width) drawn from the random module's generator while
 * random.uniform is the unpatched one; a replaced one (nothing was called)
 * is left to the general path, which calls it. */
static Py_NO_INLINE PyObject *
uniform_jitter_python(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, rbc_state *st, int equal)
{
    double high, jitter;
    int cap_wins;
    if (st != NULL && direct_capped_bound(self, args, nargs, kwnames, &high, &cap_wins)) {
        double low = equal ? high / 2.0 : 0.0, width = equal ? low : high;
        int status = rbc_random_uniform(&st->random, 0.0, width, &jitter);
        if (status < 0) {
            return NULL;
        }
        if (status == 0) {
            return direct_result(st, equal ? low + jitter : jitter);
        }
    }
    return capped_compute_method(self, args, nargs, kwnames,
                                 equal ? compute_equal_jitter : compute_full_jitter);
}

/* compute() of FullJitter (equal 0) and EqualJitter (equal 1).  The fast
 * source draws in C: nothing runs Python code, and the fields need not be
 * owned. */
static inline Py_ALWAYS_INLINE PyObject *
uniform_jitter_compute(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames, PyCFunction compute, int equal)
{
    double high;
    int cap_wins;
    rbc_state *st = direct_state(self, compute);
    if (st != NULL && st->random.use_fast
        && direct_capped_bound(self, args, nargs, kwnames, &high, &cap_wins)) {
        return direct_result(st, uniform_jitter_fast(&st->random, high, equal));
    }
    return uniform_jitter_python(self, args, nargs, kwnames, st, equal);
}

static PyObject *
full_jitter_compute(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return uniform_jitter_compute(self, args, nargs, kwnames, AS_PYCFUNCTION(full_jitter_compute),
                                  0);
}

static PyObject *
equal_jitter_compute(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return uniform_jitter_compute(self, args, nargs, kwnames,
                                  AS_PYCFUNCTION(equal_jitter_compute), 1);
}

/* min(cap, exponential(x, n)) on the direct path, cap an exact float, when
 * x * 2**n is not finite (the installed release's rule decides).  A new
 * reference. */
static Py_NO_INLINE PyObject *
direct_capped_delay_rule(rbc_state *st, PyObject *cap, double x, PyObject *failures)
{
    double product;
    if (!exponential_double(&st->strategies, x, failures, &product)) {
        /* Unreachable: exponential_double takes every small exact int. */
        PyErr_SetString(PyExc_SystemError, "compute(): no fast path for the count");
        return NULL;
    }
    return product < PyFloat_AS_DOUBLE(cap) ? direct_result(st, product) : Py_NewRef(cap);
}

/* min(cap, exponential(x, n)) on the direct path, cap an exact float.  A
 * new reference. */
static inline PyObject *
direct_capped_delay(rbc_state *st, PyObject *cap, double x, PyObject *failures, int n)
{
    double product;
    if (!direct_scaled(x, n, &product)) {
        return direct_capped_delay_rule(st, cap, x, failures);
    }
    return product < PyFloat_AS_DOUBLE(cap) ? direct_result(st, product) : Py_NewRef(cap);
}

/* ExponentialWithJitter on the default source, and the general path.  The
 * default source looks random.random up in the module's dict: the cap,
 * which may be the result, is owned across the draw (the base is read
 * before it, as the general path reads it), and a replaced random.random
 * is left to the general path, which calls it. */
static Py_NO_INLINE PyObject *
exponential_with_jitter_python(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames, rbc_state *st)
{
    PyObject *cap = CAPPED(self)->cap, *base = CAPPED(self)->base;
    int n;
    if (st != NULL && direct_count(args, nargs, kwnames, &n) && PyFloat_CheckExact(cap)
        && PyFloat_CheckExact(base)) {
        double r, base_value = PyFloat_AS_DOUBLE(base);
        PyObject *delay = NULL;
        Py_INCREF(cap);
        int status = rbc_random_random_unpatched(&st->random, &r);
        if (status == 0) {
            delay = direct_capped_delay(st, cap, r * base_value, args[0], n);
        }
        Py_DECREF(cap);
        if (status <= 0) {
            return delay;
        }
    }
    return capped_compute_method(self, args, nargs, kwnames, compute_exponential_with_jitter);
}

/* min(cap, exponential(random.random() * base, n)).  The fast source draws
 * in C: nothing runs Python code, and the fields need not be owned. */
static PyObject *
exponential_with_jitter_compute(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    PyObject *cap = CAPPED(self)->cap, *base = CAPPED(self)->base;
    rbc_state *st = direct_state(self, AS_PYCFUNCTION(exponential_with_jitter_compute));
    int n;
    if (st != NULL && st->random.use_fast && direct_count(args, nargs, kwnames, &n)
        && PyFloat_CheckExact(cap) && PyFloat_CheckExact(base)) {
        double r = rbc_xoshiro_double(st->random.xoshiro);
        return direct_capped_delay(st, cap, r * PyFloat_AS_DOUBLE(base), args[0], n);
    }
    return exponential_with_jitter_python(self, args, nargs, kwnames, st);
}

/* DecorrelatedJitter's new delay `temp` (not the cap), stored as the new
 * previous one and returned.  The old previous delay, when it is an exact
 * float that nothing but this field refers to (and the module, when it is
 * the module's spare float: direct_result), is the new one: its value is
 * rewritten instead of freeing it and making another.  No program can
 * tell: those reference counts mean no name, container or caller holds it
 * (they would count), so nothing can read the old value or compare with
 * it, and the field and the result are one object as in redis-py.  Else
 * the new delay is the module's spare float when that is free, so that a
 * delay following the cap makes no float either.  Not where threads run
 * without the GIL, where another thread may take a reference between the
 * count's read and the write.  NULL with an exception set on failure. */
static inline PyObject *
decorrelated_store(rbc_state *st, DecorrelatedObject *obj, double temp)
{
    PyObject *previous = obj->previous;
#ifndef Py_GIL_DISABLED
    Py_ssize_t others = previous == st->strategies.spare_result ? 1 : 0;
    if (PyFloat_CheckExact(previous) && Py_REFCNT(previous) == 1 + others) {
        ((PyFloatObject *)previous)->ob_fval = temp;
        return Py_NewRef(previous);
    }
#endif
    PyObject *delay = direct_result(st, temp);
    if (delay == NULL) {
        return NULL;
    }
    /* The field is written before the old delay is released (on the fast
     * source a float or an int, whose free runs no Python code). */
    Py_SETREF(obj->previous, Py_NewRef(delay));
    return delay;
}

/* DecorrelatedJitter's cap as its delay: stored as the new previous one and
 * returned (the old one, a float or an int, frees without running Python
 * code; the cap stays referenced by its field). */
static inline PyObject *
decorrelated_store_cap(DecorrelatedObject *obj)
{
    PyObject *cap = obj->capped.cap;
    Py_SETREF(obj->previous, Py_NewRef(cap));
    return Py_NewRef(cap);
}

/* The parameters and the previous delay of the direct path, as doubles:
 * compute(n) with n an exact int, cap, base and previous exact floats or
 * small ints. */
static inline int
decorrelated_direct_inputs(DecorrelatedObject *obj, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames, double *cap, double *base, double *previous)
{
    return nargs == 1 && kwnames == NULL && PyLong_CheckExact(args[0])
           && exact_double(obj->capped.cap, cap) && exact_double(obj->capped.base, base)
           && exact_double(obj->previous, previous);
}

/* DecorrelatedJitter on the default source, and the general path.  The
 * cap, which may be the result, is owned across the draw (the default
 * source looks random.uniform up in the module's dict, which may run
 * Python code); the previous delay is read again after it.  A replaced
 * random.uniform is left to the general path, which calls it. */
static Py_NO_INLINE PyObject *
decorrelated_python(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    rbc_state *st)
{
    PyObject *failures; /* bound for its checks, not used by the formula */
    DecorrelatedObject *obj = DECORRELATED(self);
    double cap, base, previous, temp;
    if (st != NULL && decorrelated_direct_inputs(obj, args, nargs, kwnames, &cap, &base, &previous)) {
        double tripled = previous * 3.0;
        double high = tripled > base ? tripled : base; /* max(base, tripled) */
        PyObject *cap_obj = Py_NewRef(obj->capped.cap), *delay = NULL;
        int status = rbc_random_uniform(&st->random, base, high, &temp);
        if (status == 0) {
            if (temp < cap) {
                delay = decorrelated_store(st, obj, temp);
            }
            else {
                Py_SETREF(obj->previous, Py_NewRef(cap_obj));
                delay = Py_NewRef(cap_obj);
            }
        }
        Py_DECREF(cap_obj);
        if (status > 0) {
            return compute_decorrelated(st, obj);
        }
        return delay;
    }
    st = compute_call_state(self, args, nargs, kwnames, &failures);
    if (st == NULL) {
        return NULL;
    }
    return compute_decorrelated(st, obj);
}

/* DecorrelatedJitter: max(base, previous * 3), the draw and min(cap, temp)
 * in doubles, the new previous stored.  The fast source draws in C:
 * nothing runs Python code, and the fields need not be owned. */
static PyObject *
decorrelated_compute(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    DecorrelatedObject *obj = DECORRELATED(self);
    double cap, base, previous;
    rbc_state *st = direct_state(self, AS_PYCFUNCTION(decorrelated_compute));
    if (st != NULL && st->random.use_fast
        && decorrelated_direct_inputs(obj, args, nargs, kwnames, &cap, &base, &previous)) {
        double tripled = previous * 3.0;
        double high = tripled > base ? tripled : base; /* max(base, tripled) */
        double temp = rbc_random_uniform_fast(&st->random, base, high);
        return temp < cap ? decorrelated_store(st, obj, temp) : decorrelated_store_cap(obj);
    }
    return decorrelated_python(self, args, nargs, kwnames, st);
}

static PyObject *
noop_reset(PyObject *self, PyObject *unused)
{
    Py_RETURN_NONE;
}

static PyObject *
decorrelated_reset(PyObject *self, PyObject *unused)
{
    decorrelated_restart(self);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------- */
/* Construction                                                            */

/* Object with every field at redis-py's default, so that even an object
 * made by __new__ alone (as copy and pickle do) is valid. */
static PyObject *
strategy_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    rbc_state *st = rbc_state_from_type(type);
    if (st == NULL) {
        return NULL;
    }
    rbc_strategies_state *ss = &st->strategies;
    PyObject *self = type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    if (PyObject_TypeCheck(self, ss->types[RBC_CONSTANT])) {
        CONSTANT(self)->backoff = Py_NewRef(st->common.int_zero);
        return self;
    }
    CAPPED(self)->cap = Py_NewRef(ss->default_cap);
    CAPPED(self)->base = Py_NewRef(ss->default_base);
    if (PyObject_TypeCheck(self, ss->types[RBC_DECORRELATED_JITTER])) {
        DECORRELATED(self)->previous = Py_NewRef(st->common.int_zero);
    }
    return self;
}

/* The constructors' signatures, by kind; their text forms open the types'
 * docstrings (strategy_slots below). */
static const char *const capped_parameters[] = {"cap", "base"};
static const char *const constant_parameters[] = {"backoff"};
static const rbc_signature constructor_signatures[RBC_STRATEGY_COUNT] = {
    [RBC_CONSTANT] = {"ConstantBackoff", constant_parameters, 1, 1},
    [RBC_NO_BACKOFF] = {"NoBackoff", NULL, 0, 0},
    [RBC_EXPONENTIAL] = {"ExponentialBackoff", capped_parameters, 2, 2},
    [RBC_FULL_JITTER] = {"FullJitterBackoff", capped_parameters, 2, 2},
    [RBC_EQUAL_JITTER] = {"EqualJitterBackoff", capped_parameters, 2, 2},
    [RBC_DECORRELATED_JITTER] = {"DecorrelatedJitterBackoff", capped_parameters, 2, 2},
    [RBC_EXPONENTIAL_WITH_JITTER] = {"ExponentialWithJitterBackoff", capped_parameters, 2, 2},
};

/* The signature of the C type `type` is or derives from. */
static const rbc_signature *
constructor_signature(rbc_strategies_state *ss, PyTypeObject *type)
{
    for (; type != NULL; type = type->tp_base) {
        int kind = rbc_strategy_type_kind(ss, type);
        if (kind >= 0) {
            return &constructor_signatures[kind];
        }
    }
    return &constructor_signatures[RBC_CONSTANT];
}

static const char *
short_type_name(PyTypeObject *type)
{
    const char *dot = strrchr(type->tp_name, '.');
    return dot != NULL ? dot + 1 : type->tp_name;
}

static int
capped_set_parameters(PyObject *self, PyObject *cap, PyObject *base)
{
    const char *owner = short_type_name(Py_TYPE(self));
    if (rbc_check_real(owner, "cap", cap) < 0 || rbc_check_real(owner, "base", base) < 0) {
        return -1;
    }
    Py_SETREF(CAPPED(self)->cap, Py_NewRef(cap));
    Py_SETREF(CAPPED(self)->base, Py_NewRef(base));
    return 0;
}

static int
capped_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return -1;
    }
    PyObject *values[2] = {st->strategies.default_cap, st->strategies.default_base};
    if (rbc_bind_tuple(constructor_signature(&st->strategies, Py_TYPE(self)), args, kwds, values)
            < 0
        || capped_set_parameters(self, values[0], values[1]) < 0) {
        return -1;
    }
    if (PyObject_TypeCheck(self, st->strategies.types[RBC_DECORRELATED_JITTER])) {
        decorrelated_restart(self);
    }
    return 0;
}

static int
constant_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return -1;
    }
    const rbc_signature *sig = constructor_signature(&st->strategies, Py_TYPE(self));
    PyObject *value = NULL;
    if (rbc_bind_tuple(sig, args, kwds, &value) < 0) {
        return -1;
    }
    if (sig->count == 0) { /* NoBackoff */
        value = st->common.int_zero;
    }
    else if (rbc_check_real(short_type_name(Py_TYPE(self)), "backoff", value) < 0) {
        return -1;
    }
    Py_SETREF(CONSTANT(self)->backoff, Py_NewRef(value));
    return 0;
}

/* A new object of one of our exact strategy types, its fields set from
 * values[] (checked by the caller): what strategy_new then __init__ leave,
 * without the generic allocation, the module lookup and the subtype
 * checks that a subclass needs.  The types have no __dict__ or weakref
 * slot, and their tp_free is PyObject_GC_Del. */
static PyObject *
strategy_alloc_exact(rbc_state *st, PyTypeObject *type, PyObject *const *values)
{
    rbc_strategies_state *ss = &st->strategies;
    PyObject *self = PyObject_GC_New(PyObject, type); /* a heap type: it takes a reference */
    if (self == NULL) {
        return NULL;
    }
    if (type == ss->types[RBC_CONSTANT]) {
        CONSTANT(self)->backoff = Py_NewRef(values[0]);
    }
    else if (type == ss->types[RBC_NO_BACKOFF]) {
        CONSTANT(self)->backoff = Py_NewRef(st->common.int_zero);
    }
    else {
        CAPPED(self)->cap = Py_NewRef(values[0]);
        CAPPED(self)->base = Py_NewRef(values[1]);
        if (type == ss->types[RBC_DECORRELATED_JITTER]) {
            DECORRELATED(self)->previous = Py_NewRef(st->common.int_zero);
        }
    }
    PyObject_GC_Track(self);
    return self;
}

/* Vectorcall of the exact C types: construction without tp_new + tp_init's
 * tuple and dict.  Subclasses never inherit tp_vectorcall, so `type` is
 * always one of ours here. */
static PyObject *
strategy_vectorcall(PyObject *type_obj, PyObject *const *args, size_t nargsf,
                    PyObject *kwnames)
{
    PyTypeObject *type = (PyTypeObject *)type_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    rbc_state *st = (rbc_state *)PyType_GetModuleState(type);
    rbc_strategies_state *ss = &st->strategies;
    PyObject *values[2] = {NULL, NULL};
    int has_kw = kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0;
    if (type == ss->types[RBC_NO_BACKOFF]) {
        if ((nargs != 0 || has_kw)
            && rbc_bind(&constructor_signatures[RBC_NO_BACKOFF], args, nargs, kwnames, values)
                   < 0) {
            return NULL;
        }
    }
    else if (type == ss->types[RBC_CONSTANT]) {
        const rbc_signature *sig = &constructor_signatures[RBC_CONSTANT];
        if (rbc_bind(sig, args, nargs, kwnames, values) < 0
            || rbc_check_real(sig->function, "backoff", values[0]) < 0) {
            return NULL;
        }
    }
    else {
        values[0] = ss->default_cap;
        values[1] = ss->default_base;
        /* ExponentialBackoff(): the defaults, known to be floats. */
        if (nargs != 0 || has_kw) {
            const rbc_signature *sig = constructor_signature(ss, type);
            if (rbc_bind(sig, args, nargs, kwnames, values) < 0
                || rbc_check_real(sig->function, "cap", values[0]) < 0
                || rbc_check_real(sig->function, "base", values[1]) < 0) {
                return NULL;
            }
        }
    }
    return strategy_alloc_exact(st, type, values);
}

/* ---------------------------------------------------------------------- */
/* GC and deallocation                                                     */

static int
constant_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(CONSTANT(self)->backoff);
    return 0;
}

/* tp_clear leaves None behind rather than NULL: an object reached by a
 * finaliser during collection stays safe to use (compute raises TypeError). */
static int
constant_clear(PyObject *self)
{
    Py_XSETREF(CONSTANT(self)->backoff, Py_NewRef(Py_None));
    return 0;
}

static int
capped_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(CAPPED(self)->cap);
    Py_VISIT(CAPPED(self)->base);
    return 0;
}

static int
capped_clear(PyObject *self)
{
    Py_XSETREF(CAPPED(self)->cap, Py_NewRef(Py_None));
    Py_XSETREF(CAPPED(self)->base, Py_NewRef(Py_None));
    return 0;
}

static int
decorrelated_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(DECORRELATED(self)->previous);
    return capped_traverse(self, visit, arg);
}

static int
decorrelated_clear(PyObject *self)
{
    Py_XSETREF(DECORRELATED(self)->previous, Py_NewRef(Py_None));
    return capped_clear(self);
}

static void
constant_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(CONSTANT(self)->backoff);
    type->tp_free(self);
    Py_DECREF(type);
}

static void
capped_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(CAPPED(self)->cap);
    Py_CLEAR(CAPPED(self)->base);
    type->tp_free(self);
    Py_DECREF(type);
}

static void
decorrelated_dealloc(PyObject *self)
{
    Py_CLEAR(DECORRELATED(self)->previous);
    capped_dealloc(self);
}

/* ---------------------------------------------------------------------- */
/* Attributes                                                              */

/* A parameter attribute, the closure of its PyGetSetDef: where the field
 * lies in the object, and its Python name for the error messages. */
typedef struct {
    Py_ssize_t offset;
    const char *name;
} field_def;

static const field_def backoff_field = {offsetof(ConstantObject, backoff), "_backoff"};
static const field_def cap_field = {offsetof(CappedObject, cap), "_cap"};
static const field_def base_field = {offsetof(CappedObject, base), "_base"};
static const field_def previous_field = {offsetof(DecorrelatedObject, previous),
                                         "_previous_backoff"};

static inline PyObject **
field_slot(PyObject *self, void *closure)
{
    return (PyObject **)((char *)self + ((const field_def *)closure)->offset);
}

static PyObject *
strategy_get_field(PyObject *self, void *closure)
{
    return Py_NewRef(*field_slot(self, closure));
}

/* Any real number, as the constructors take; never deleted. */
static int
strategy_set_field(PyObject *self, PyObject *value, void *closure)
{
    const char *name = ((const field_def *)closure)->name;
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete attribute '%s'", name);
        return -1;
    }
    if (!rbc_is_real_number(value)) {
        PyErr_Format(PyExc_TypeError, "%s.%s must be a real number, not %.200s",
                     short_type_name(Py_TYPE(self)), name, Py_TYPE(value)->tp_name);
        return -1;
    }
    Py_SETREF(*field_slot(self, closure), Py_NewRef(value));
    return 0;
}

static PyGetSetDef capped_getset[] = {
    {"_cap", strategy_get_field, strategy_set_field, "maximum delay, in seconds",
     (void *)&cap_field},
    {"_base", strategy_get_field, strategy_set_field, "base delay, in seconds",
     (void *)&base_field},
    {NULL},
};

static PyGetSetDef decorrelated_getset[] = {
    {"_cap", strategy_get_field, strategy_set_field, "maximum delay, in seconds",
     (void *)&cap_field},
    {"_base", strategy_get_field, strategy_set_field, "base delay, in seconds",
     (void *)&base_field},
    {"_previous_backoff", strategy_get_field, strategy_set_field,
     "the last delay computed since reset()", (void *)&previous_field},
    {NULL},
};

static PyGetSetDef constant_getset[] = {
    {"_backoff", strategy_get_field, strategy_set_field, "the constant delay, in seconds",
     (void *)&backoff_field},
    {NULL},
};

/* ---------------------------------------------------------------------- */
/* ==, hash, repr                                                          */

/* hash(tuple(items)) for one or two items. */
static Py_hash_t
tuple_hash(PyObject *const *items, Py_ssize_t count)
{
    Py_hash_t lanes[2];
    assert(count <= 2);
    for (Py_ssize_t i = 0; i < count; i++) {
        lanes[i] = PyObject_Hash(items[i]);
        if (lanes[i] == -1) {
            return -1;
        }
    }
    return rbc_combine_hashes(lanes, count);
}

/* The hashes, comparisons and reprs of the parameters run Python code (a
 * __hash__, __eq__ or __repr__) that may assign the attributes, and so free
 * the objects read before it: each function owns what it read until done. */
static Py_hash_t
constant_hash(PyObject *self)
{
    PyObject *item = Py_NewRef(CONSTANT(self)->backoff);
    Py_hash_t hash = tuple_hash(&item, 1);
    Py_DECREF(item);
    return hash;
}

static Py_hash_t
capped_hash(PyObject *self)
{
    PyObject *items[2] = {Py_NewRef(CAPPED(self)->base), Py_NewRef(CAPPED(self)->cap)};
    Py_hash_t hash = tuple_hash(items, 2);
    Py_DECREF(items[0]);
    Py_DECREF(items[1]);
    return hash;
}

/* Is `other` of the family `kind` (ours or redis-py's), as redis-py's
 * isinstance(other, <class>) asks?  1, 0, or -1 on error. */
static int
same_family(rbc_state *st, PyObject *other, int kind)
{
    if (PyObject_TypeCheck(other, st->strategies.types[kind])) {
        return 1;
    }
    return PyObject_IsInstance(other, st->strategies.redis_classes[kind]);
}

/* Field i of a C strategy of the family `kind`: _backoff, or _base then
 * _cap.  New reference. */
static inline PyObject *
field_of(PyObject *obj, int kind, Py_ssize_t i)
{
    if (kind == RBC_CONSTANT) {
        return Py_NewRef(CONSTANT(obj)->backoff);
    }
    return Py_NewRef(i == 0 ? CAPPED(obj)->base : CAPPED(obj)->cap);
}

/* `self.a == other.a and self.b == other.b`, with `and`'s result.  Each
 * field is read just before its comparison, as redis-py reads it, and owned
 * during it: the first comparison may run code that assigns the second. */
static PyObject *
compare_fields(rbc_state *st, PyObject *self, PyObject *other, int kind,
               PyObject *const *names, Py_ssize_t count)
{
    PyObject *result = NULL, *mine = NULL, *theirs = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        mine = field_of(self, kind, i);
        theirs = PyObject_TypeCheck(other, st->strategies.types[kind])
                     ? field_of(other, kind, i)
                     : PyObject_GetAttr(other, names[i]);
        if (theirs == NULL) {
            goto error;
        }
        Py_XSETREF(result, PyObject_RichCompare(mine, theirs, Py_EQ));
        Py_CLEAR(mine);
        Py_CLEAR(theirs);
        if (result == NULL) {
            goto error;
        }
        if (i + 1 < count) {
            int truth = PyObject_IsTrue(result);
            if (truth < 0) {
                goto error;
            }
            if (!truth) {
                break;
            }
        }
    }
    return result;
error:
    Py_XDECREF(mine);
    Py_XDECREF(theirs);
    Py_XDECREF(result);
    return NULL;
}

/* The family whose __eq__ an instance of `type` has: the one of the seven
 * types it is or derives from (its tp_base chain reaches it: a class can
 * have only one of them among its bases, their layouts conflict).
 * NoBackoff has ConstantBackoff's. */
static int
equality_kind(rbc_strategies_state *ss, PyTypeObject *type)
{
    for (PyTypeObject *t = type; t != NULL; t = t->tp_base) {
        int kind = rbc_strategy_type_kind(ss, t);
        if (kind >= 0) {
            return kind == RBC_NO_BACKOFF ? RBC_CONSTANT : kind;
        }
    }
    PyErr_Format(PyExc_SystemError, "%s is not a backoff strategy", type->tp_name);
    return -1;
}

/* tp_richcompare of every strategy: redis-py's __eq__, and the __ne__ that
 * object derives from it. */
static PyObject *
strategy_richcompare(PyObject *self, PyObject *other, int op)
{
    if (op != Py_EQ && op != Py_NE) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return NULL;
    }
    int kind = equality_kind(&st->strategies, Py_TYPE(self));
    if (kind < 0) {
        return NULL;
    }
    int family = same_family(st, other, kind);
    if (family < 0) {
        return NULL;
    }
    if (!family) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *result;
    if (kind == RBC_CONSTANT) {
        PyObject *names[1] = {st->common.str_backoff};
        result = compare_fields(st, self, other, kind, names, 1);
    }
    else {
        PyObject *names[2] = {st->strategies.str_base, st->strategies.str_cap};
        result = compare_fields(st, self, other, kind, names, 2);
    }
    if (result == NULL || op == Py_EQ) {
        return result;
    }
    /* object.__ne__: the negation of __eq__. */
    int truth = PyObject_IsTrue(result);
    Py_DECREF(result);
    return truth < 0 ? NULL : PyBool_FromLong(!truth);
}

static PyObject *
constant_repr(PyObject *self)
{
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return NULL;
    }
    if (PyObject_TypeCheck(self, st->strategies.types[RBC_NO_BACKOFF])) {
        return PyUnicode_FromFormat("%s()", short_type_name(Py_TYPE(self)));
    }
    PyObject *backoff = Py_NewRef(CONSTANT(self)->backoff);
    PyObject *repr = PyUnicode_FromFormat("%s(backoff=%R)", short_type_name(Py_TYPE(self)),
                                          backoff);
    Py_DECREF(backoff);
    return repr;
}

static PyObject *
capped_repr(PyObject *self)
{
    /* Owned: repr(cap) may run code that assigns _base. */
    PyObject *cap = Py_NewRef(CAPPED(self)->cap), *base = Py_NewRef(CAPPED(self)->base);
    PyObject *repr = PyUnicode_FromFormat("%s(cap=%R, base=%R)", short_type_name(Py_TYPE(self)),
                                          cap, base);
    Py_DECREF(cap);
    Py_DECREF(base);
    return repr;
}

/* ---------------------------------------------------------------------- */
/* copy and pickle                                                         */

/* __reduce__: (copyreg.__newobj__, (type,), state).  Like redis-py's
 * objects, the copy is made by __new__ and the state set afterwards, so a
 * subclass with another __init__ signature copies too.  The state holds the
 * instance __dict__ of a Python subclass and our attributes. */
static PyObject *
strategy_reduce(PyObject *self, PyObject *unused)
{
    rbc_state *st = rbc_state_of(self);
    if (st == NULL) {
        return NULL;
    }
    rbc_strategies_state *ss = &st->strategies;
    PyObject *state = PyDict_New();
    if (state == NULL) {
        return NULL;
    }
    PyObject *instance_dict;
    if (rbc_get_optional_attr(self, st->common.str_dict, &instance_dict) < 0) {
        goto error;
    }
    if (instance_dict != NULL) {
        int status = PyDict_Update(state, instance_dict);
        Py_DECREF(instance_dict);
        if (status < 0) {
            goto error;
        }
    }
    if (rbc_slots_to_state(&st->slots, self, state) < 0) {
        goto error;
    }
    if (PyObject_TypeCheck(self, ss->types[RBC_CONSTANT])) {
        if (PyDict_SetItem(state, st->common.str_backoff, CONSTANT(self)->backoff) < 0) {
            goto error;
        }
    }
    else {
        if (PyDict_SetItem(state, ss->str_cap, CAPPED(self)->cap) < 0
            || PyDict_SetItem(state, ss->str_base, CAPPED(self)->base) < 0) {
            goto error;
        }
        if (PyObject_TypeCheck(self, ss->types[RBC_DECORRELATED_JITTER])
            && PyDict_SetItem(state, ss->str_previous_backoff,
                              DECORRELATED(self)->previous)
                   < 0) {
            goto error;
        }
    }
    return Py_BuildValue("O(O)N", st->common.copyreg_newobj, (PyObject *)Py_TYPE(self), state);
error:
    Py_DECREF(state);
    return NULL;
}

static PyObject *
strategy_setstate(PyObject *self, PyObject *state)
{
    if (!PyDict_Check(state)) {
        PyErr_Format(PyExc_TypeError, "__setstate__() argument must be a dict, not %.200s",
                     Py_TYPE(state)->tp_name);
        return NULL;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    Py_INCREF(state); /* setattr may run code that mutates it */
    while (PyDict_Next(state, &pos, &key, &value)) {
        Py_INCREF(key);
        Py_INCREF(value);
        int status = PyObject_SetAttr(self, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (status < 0) {
            Py_DECREF(state);
            return NULL;
        }
    }
    Py_DECREF(state);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------- */
/* Type specs                                                              */

/* Method and slot tables, laid out by hand. */
/* clang-format off */
#define COMPUTE_DOC "compute($self, failures)\n--\n\n" \
                    "The delay, in seconds, before retry number `failures`."
#define RESET_DOC "reset($self)\n--\n\nCalled once at the start of every call_with_retry()."

/* The entries every strategy's method table ends with, the same in each. */
#define COMMON_METHODS                                                            \
    {"__reduce__", strategy_reduce, METH_NOARGS, NULL},                           \
    {"__setstate__", strategy_setstate, METH_O, NULL}

static PyMethodDef constant_methods[] = {
    {"compute", (PyCFunction)(void (*)(void))constant_compute, METH_FASTCALL | METH_KEYWORDS,
     COMPUTE_DOC},
    {"reset", noop_reset, METH_NOARGS, RESET_DOC},
    COMMON_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyMethodDef exponential_methods[] = {
    {"compute", (PyCFunction)(void (*)(void))exponential_compute, METH_FASTCALL | METH_KEYWORDS,
     COMPUTE_DOC},
    {"reset", noop_reset, METH_NOARGS, RESET_DOC},
    COMMON_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyMethodDef full_jitter_methods[] = {
    {"compute", (PyCFunction)(void (*)(void))full_jitter_compute, METH_FASTCALL | METH_KEYWORDS,
     COMPUTE_DOC},
    {"reset", noop_reset, METH_NOARGS, RESET_DOC},
    COMMON_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyMethodDef equal_jitter_methods[] = {
    {"compute", (PyCFunction)(void (*)(void))equal_jitter_compute, METH_FASTCALL | METH_KEYWORDS,
     COMPUTE_DOC},
    {"reset", noop_reset, METH_NOARGS, RESET_DOC},
    COMMON_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyMethodDef decorrelated_methods[] = {
    {"compute", (PyCFunction)(void (*)(void))decorrelated_compute, METH_FASTCALL | METH_KEYWORDS,
     COMPUTE_DOC},
    {"reset", decorrelated_reset, METH_NOARGS, RESET_DOC},
    COMMON_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyMethodDef exponential_with_jitter_methods[] = {
    {"compute", (PyCFunction)(void (*)(void))exponential_with_jitter_compute,
     METH_FASTCALL | METH_KEYWORDS, COMPUTE_DOC},
    {"reset", noop_reset, METH_NOARGS, RESET_DOC},
    COMMON_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyType_Slot constant_slots[] = {
    {Py_tp_doc, (void *)"ConstantBackoff(backoff)\n--\n\nThe same delay after every failure."},
    {Py_tp_methods, constant_methods},
    {Py_tp_new, strategy_new},
    {Py_tp_init, constant_init},
    {Py_tp_repr, constant_repr},
    {Py_tp_hash, constant_hash},
    {Py_tp_richcompare, strategy_richcompare},
    {Py_tp_getset, constant_getset},
    {Py_tp_traverse, constant_traverse},
    {Py_tp_clear, constant_clear},
    {Py_tp_dealloc, constant_dealloc},
    {0, NULL},
};

/* NoBackoff subclasses ConstantBackoff and inherits the other slots. */
static PyType_Slot no_backoff_slots[] = {
    {Py_tp_doc, (void *)"NoBackoff()\n--\n\nNo delay: ConstantBackoff(0)."},
    {Py_tp_init, constant_init},
    {Py_tp_repr, constant_repr},
    {Py_tp_traverse, constant_traverse},
    {Py_tp_clear, constant_clear},
    {Py_tp_dealloc, constant_dealloc},
    {0, NULL},
};

static PyType_Slot decorrelated_slots[] = {
    {Py_tp_doc, (void *)"DecorrelatedJitterBackoff(cap=0.512, base=0.008)\n--\n\n"
                        "min(cap, uniform(base, max(base, 3 * previous delay)))."},
    {Py_tp_methods, decorrelated_methods},
    {Py_tp_new, strategy_new},
    {Py_tp_init, capped_init},
    {Py_tp_repr, capped_repr},
    {Py_tp_hash, capped_hash},
    {Py_tp_richcompare, strategy_richcompare},
    {Py_tp_getset, decorrelated_getset},
    {Py_tp_traverse, decorrelated_traverse},
    {Py_tp_clear, decorrelated_clear},
    {Py_tp_dealloc, decorrelated_dealloc},
    {0, NULL},
};

/* The slots of the four types with just _cap and _base, after their doc and
 * methods: the same in each. */
#define CAPPED_SLOTS                                                              \
    {Py_tp_new, strategy_new},                                                    \
    {Py_tp_init, capped_init},                                                    \
    {Py_tp_repr, capped_repr},                                                    \
    {Py_tp_hash, capped_hash},                                                    \
    {Py_tp_richcompare, strategy_richcompare},                                    \
    {Py_tp_getset, capped_getset},                                                \
    {Py_tp_traverse, capped_traverse},                                            \
    {Py_tp_clear, capped_clear},                                                  \
    {Py_tp_dealloc, capped_dealloc}

static PyType_Slot exponential_slots[] = {
    {Py_tp_doc, (void *)"ExponentialBackoff(cap=0.512, base=0.008)\n--\n\n"
                        "min(cap, base * 2**failures)."},
    {Py_tp_methods, exponential_methods},
    CAPPED_SLOTS,
    {0, NULL},
};

static PyType_Slot full_jitter_slots[] = {
    {Py_tp_doc, (void *)"FullJitterBackoff(cap=0.512, base=0.008)\n--\n\n"
                        "uniform(0, min(cap, base * 2**failures))."},
    {Py_tp_methods, full_jitter_methods},
    CAPPED_SLOTS,
    {0, NULL},
};

static PyType_Slot equal_jitter_slots[] = {
    {Py_tp_doc, (void *)"EqualJitterBackoff(cap=0.512, base=0.008)\n--\n\n"
                        "temp + uniform(0, temp) with temp = min(cap, base * 2**failures) / 2."},
    {Py_tp_methods, equal_jitter_methods},
    CAPPED_SLOTS,
    {0, NULL},
};

static PyType_Slot exponential_with_jitter_slots[] = {
    {Py_tp_doc, (void *)"ExponentialWithJitterBackoff(cap=0.512, base=0.008)\n--\n\n"
                        "min(cap, random() * base * 2**failures)."},
    {Py_tp_methods, exponential_with_jitter_methods},
    CAPPED_SLOTS,
    {0, NULL},
};

#define TYPE_FLAGS (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC)

/* {name, basicsize, itemsize, flags, slots} */
static PyType_Spec specs[RBC_STRATEGY_COUNT] = {
    [RBC_CONSTANT] = {"redis_backoff_c.ConstantBackoff",
        sizeof(ConstantObject), 0, TYPE_FLAGS, constant_slots},
    [RBC_NO_BACKOFF] = {"redis_backoff_c.NoBackoff",
        sizeof(ConstantObject), 0, TYPE_FLAGS, no_backoff_slots},
    [RBC_EXPONENTIAL] = {"redis_backoff_c.ExponentialBackoff",
        sizeof(CappedObject), 0, TYPE_FLAGS, exponential_slots},
    [RBC_FULL_JITTER] = {"redis_backoff_c.FullJitterBackoff",
        sizeof(CappedObject), 0, TYPE_FLAGS, full_jitter_slots},
    [RBC_EQUAL_JITTER] = {"redis_backoff_c.EqualJitterBackoff",
        sizeof(CappedObject), 0, TYPE_FLAGS, equal_jitter_slots},
    [RBC_DECORRELATED_JITTER] = {"redis_backoff_c.DecorrelatedJitterBackoff",
        sizeof(DecorrelatedObject), 0, TYPE_FLAGS, decorrelated_slots},
    [RBC_EXPONENTIAL_WITH_JITTER] = {"redis_backoff_c.ExponentialWithJitterBackoff",
        sizeof(CappedObject), 0, TYPE_FLAGS, exponential_with_jitter_slots},
};
/* clang-format on */

/* ---------------------------------------------------------------------- */
/* Module state                                                            */

static int
import_redis_classes(rbc_strategies_state *ss)
{
    PyObject *redis_backoff = PyImport_ImportModule("redis.backoff");
    if (redis_backoff == NULL) {
        return -1;
    }
    int status = 0;
    for (int kind = 0; kind < RBC_STRATEGY_COUNT && status == 0; kind++) {
        ss->redis_classes[kind] = PyObject_GetAttrString(redis_backoff, constructor_signatures[kind].function);
        status = ss->redis_classes[kind] == NULL ? -1 : 0;
    }
    if (status == 0) {
        ss->abstract_backoff = PyObject_GetAttrString(redis_backoff, "AbstractBackoff");
        status = ss->abstract_backoff == NULL ? -1 : 0;
    }
    Py_DECREF(redis_backoff);
    return status;
}

static int
init_constants(rbc_strategies_state *ss)
{
    ss->fraction_type = (PyTypeObject *)rbc_import_attr("fractions", "Fraction");
    if (ss->fraction_type == NULL) {
        return -1;
    }
    if (!PyType_Check(ss->fraction_type)) {
        Py_CLEAR(ss->fraction_type);
        PyErr_SetString(PyExc_ImportError, "fractions.Fraction is not a class");
        return -1;
    }
    ss->default_cap = PyFloat_FromDouble(0.512);
    ss->default_base = PyFloat_FromDouble(0.008);
    ss->int_two = PyLong_FromLong(2);
    ss->int_three = PyLong_FromLong(3);
    ss->str_cap = PyUnicode_InternFromString("_cap");
    ss->str_base = PyUnicode_InternFromString("_base");
    ss->str_previous_backoff = PyUnicode_InternFromString("_previous_backoff");
    ss->str_compute = PyUnicode_InternFromString("compute");
    ss->str_reset = PyUnicode_InternFromString("reset");
    ss->spare_result = PyFloat_FromDouble(0.0);
    if (!ss->spare_result || !ss->default_cap || !ss->default_base
        || !ss->int_two || !ss->int_three || !ss->str_cap || !ss->str_base
        || !ss->str_previous_backoff
        || !ss->str_compute || !ss->str_reset) {
        return -1;
    }
    return 0;
}

/* The type's compute or reset as it finds it now (borrowed), or NULL when
 * absent: in its own dict or in a base that is one of the seven (NoBackoff
 * inherits ConstantBackoff's). */
static PyObject *
own_method(rbc_strategies_state *ss, PyTypeObject *type, PyObject *name)
{
    for (; type != NULL && rbc_strategy_type_kind(ss, type) >= 0; type = type->tp_base) {
        PyObject *found = PyDict_GetItemWithError(type->tp_dict, name);
        if (found != NULL || PyErr_Occurred()) {
            return found;
        }
    }
    return NULL;
}

/* Called when the class of a kind has no version tag or another one than
 * when its methods were last checked: the kind again if its compute and
 * reset are its own (the tag is then remembered), -1 if either was
 * replaced, so that the caller goes through Python.  Never fails: an error
 * on the way also answers -1, and the Python call finds what is there. */
int
rbc_strategy_revalidate(rbc_strategies_state *ss, int kind)
{
    PyTypeObject *type = ss->types[kind];
    if (type == NULL || own_method(ss, type, ss->str_compute) != ss->unpatched_compute[kind]
        || own_method(ss, type, ss->str_reset) != ss->unpatched_reset[kind]) {
        PyErr_Clear();
        return -1;
    }
    /* Ask CPython for a version tag: it gives one on a type attribute
     * lookup (3.10, 3.11) or on request (3.12+). */
#if PY_VERSION_HEX >= 0x030C0000
    (void)PyUnstable_Type_AssignVersionTag(type);
#else
    PyObject *method = PyObject_GetAttr((PyObject *)type, ss->str_compute);
    if (method == NULL) {
        PyErr_Clear();
        return -1;
    }
    Py_DECREF(method);
#endif
    ss->unpatched_version_tags[kind] = rbc_valid_version_tag(type);
    return kind;
}

/* Remember each type's compute and reset as created. */
static int
record_unpatched_methods(rbc_strategies_state *ss, int kind)
{
    PyTypeObject *type = ss->types[kind];
    ss->unpatched_compute[kind] = Py_XNewRef(own_method(ss, type, ss->str_compute));
    ss->unpatched_reset[kind] = Py_XNewRef(own_method(ss, type, ss->str_reset));
    if (ss->unpatched_compute[kind] == NULL || ss->unpatched_reset[kind] == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_SystemError, "%s has no compute or reset", constructor_signatures[kind].function);
        }
        return -1;
    }
    ss->unpatched_version_tags[kind] = 0;
    return 0;
}

#ifdef RBC_STATE_IN_TYPE_TOKEN
/* The most slots a spec above has, its end marker included. */
#define MAX_SPEC_SLOTS 16

/* PyType_FromModuleAndSpec with the module's state as the type's token
 * (what direct_state reads): the spec's slots, then {Py_tp_token, st}.
 * The token outlives the type, which owns its module. */
static PyObject *
type_from_spec(rbc_state *st, PyObject *module, const PyType_Spec *spec, PyObject *bases)
{
    PyType_Slot slots[MAX_SPEC_SLOTS + 1];
    PyType_Spec with_token = *spec;
    int count = 0;
    while (spec->slots[count].slot != 0) {
        if (count + 2 > MAX_SPEC_SLOTS + 1) {
            PyErr_Format(PyExc_SystemError, "%s: too many type slots", spec->name);
            return NULL;
        }
        slots[count] = spec->slots[count];
        count++;
    }
    slots[count] = (PyType_Slot){Py_tp_token, st};
    slots[count + 1] = (PyType_Slot){0, NULL};
    with_token.slots = slots;
    return PyType_FromModuleAndSpec(module, &with_token, bases);
}
#else
static PyObject *
type_from_spec(rbc_state *st, PyObject *module, PyType_Spec *spec, PyObject *bases)
{
    return PyType_FromModuleAndSpec(module, spec, bases);
}
#endif

int
rbc_strategies_init(rbc_state *st, PyObject *module)
{
    rbc_strategies_state *ss = &st->strategies;
    if (init_constants(ss) < 0 || import_redis_classes(ss) < 0) {
        return -1;
    }
    for (int kind = 0; kind < RBC_STRATEGY_COUNT; kind++) {
        PyObject *bases = NULL;
        if (kind == RBC_NO_BACKOFF) {
            bases = (PyObject *)ss->types[RBC_CONSTANT];
        }
        PyTypeObject *type = (PyTypeObject *)type_from_spec(st, module, &specs[kind], bases);
        if (type == NULL) {
            return -1;
        }
        type->tp_vectorcall = strategy_vectorcall;
        ss->types[kind] = type;
        if (record_unpatched_methods(ss, kind) < 0) {
            return -1;
        }
        if (PyModule_AddObjectRef(module, constructor_signatures[kind].function, (PyObject *)type) < 0) {
            return -1;
        }
    }
    if (PyModule_AddObjectRef(module, "DEFAULT_CAP", ss->default_cap) < 0
        || PyModule_AddObjectRef(module, "DEFAULT_BASE", ss->default_base) < 0) {
        return -1;
    }
    return 0;
}

int
rbc_strategies_traverse(rbc_strategies_state *ss, visitproc visit, void *arg)
{
    for (int kind = 0; kind < RBC_STRATEGY_COUNT; kind++) {
        Py_VISIT(ss->types[kind]);
        Py_VISIT(ss->redis_classes[kind]);
        Py_VISIT(ss->unpatched_compute[kind]);
        Py_VISIT(ss->unpatched_reset[kind]);
    }
    Py_VISIT(ss->abstract_backoff);
    Py_VISIT(ss->fraction_type);
    return 0;
}

void
rbc_strategies_clear(rbc_strategies_state *ss)
{
    for (int kind = 0; kind < RBC_STRATEGY_COUNT; kind++) {
        Py_CLEAR(ss->types[kind]);
        Py_CLEAR(ss->redis_classes[kind]);
        Py_CLEAR(ss->unpatched_compute[kind]);
        Py_CLEAR(ss->unpatched_reset[kind]);
    }
    Py_CLEAR(ss->abstract_backoff);
    Py_CLEAR(ss->fraction_type);
    Py_CLEAR(ss->default_cap);
    Py_CLEAR(ss->default_base);
    Py_CLEAR(ss->int_two);
    Py_CLEAR(ss->int_three);
    Py_CLEAR(ss->str_cap);
    Py_CLEAR(ss->str_base);
    Py_CLEAR(ss->str_previous_backoff);
    Py_CLEAR(ss->str_compute);
    Py_CLEAR(ss->str_reset);
    Py_CLEAR(ss->spare_result);
}
