// Regular expressions for the decimal integers in a range, and for the decimals a bounded JSON
// Schema number may be written as (docs/structured_output.md): what `minimum`, `maximum`,
// `exclusiveMinimum` and `exclusiveMaximum` compile to.
#ifndef WALSH_CONSTRAINT_NUMBER_RANGE_H_
#define WALSH_CONSTRAINT_NUMBER_RANGE_H_

#include <cstdint>
#include <optional>
#include <string>

namespace walsh {

// Integers written without leading zeros in [lo, hi] (nullopt: unbounded on that side; the
// unbounded side stops at 16 digits, as unbounded integers do). Empty when the range is empty.
std::string IntegerRangeRegex(std::optional<int64_t> lo, std::optional<int64_t> hi);

// Numbers in [lo, hi]: the integers there, and n.ddd wherever the whole interval between n and
// its next integer away from zero lies inside. No exponent.
std::string NumberRangeRegex(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace walsh

#endif  // WALSH_CONSTRAINT_NUMBER_RANGE_H_
