// The kernel harness (harness.h): the table of cases, run on every available backend through a
// copy of its kernel table that counts the calls of each slot, so that a case is known to call
// the slots it claims; and the check that every slot of TESSEL_KERNEL_SLOTS has a case.
#include "kernels/harness.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <ostream>
#include <set>

namespace tessel::testing {

namespace {

std::vector<KernelCase>& registry() {
  static std::vector<KernelCase> cases;
  return cases;
}

enum Slot : int {
#define TESSEL_SLOT_ENUM(op) slot_##op,
  TESSEL_KERNEL_SLOTS(TESSEL_SLOT_ENUM)
#undef TESSEL_SLOT_ENUM
  slot_count
};

const char* const kSlotNames[] = {
#define TESSEL_SLOT_NAME(op) #op,
    TESSEL_KERNEL_SLOTS(TESSEL_SLOT_NAME)
#undef TESSEL_SLOT_NAME
};

// The backend the counting table forwards to, and its calls per slot. One case runs at a time.
const Kernels* counted_backend = nullptr;
int64_t slot_calls[slot_count];

// `backend` with every slot replaced by a function that counts the call and forwards it.
Kernels counting_table(const Kernels& backend) {
  counted_backend = &backend;
  std::fill(std::begin(slot_calls), std::end(slot_calls), 0);
  Kernels k = backend;
#define TESSEL_COUNTING_SLOT(op)                \
  k.op = [](auto... args) {                     \
    ++slot_calls[slot_##op];                    \
    return counted_backend->op(args...);        \
  };
  TESSEL_KERNEL_SLOTS(TESSEL_COUNTING_SLOT)
#undef TESSEL_COUNTING_SLOT
  return k;
}

// One test: a case on a backend.
struct CaseOnBackend {
  const Kernels* backend;
  const KernelCase* kernel_case;
};

void PrintTo(const CaseOnBackend& p, std::ostream* os) {
  *os << p.kernel_case->name << " on " << p.backend->name << " ("
      << fmt::format("{}", fmt::join(p.kernel_case->slots, ", ")) << ")";
}

std::vector<CaseOnBackend> every_case_on_every_backend() {
  std::vector<CaseOnBackend> all;
  for (const Kernels* backend : available_kernels())
    for (const KernelCase& c : kernel_cases()) all.push_back({backend, &c});
  return all;
}

class KernelOps : public ::testing::TestWithParam<CaseOnBackend> {};

TEST_P(KernelOps, Check) {
  const auto [backend, kernel_case] = GetParam();
  const Kernels counting = counting_table(*backend);
  kernel_case->check(counting);
  for (const std::string& slot : kernel_case->slots) {
    const auto at = std::find(std::begin(kSlotNames), std::end(kSlotNames), slot);
    ASSERT_NE(at, std::end(kSlotNames)) << "no slot " << slot << " in TESSEL_KERNEL_SLOTS";
    EXPECT_GT(slot_calls[at - std::begin(kSlotNames)], 0)
        << "case " << kernel_case->name << " claims " << slot << " but never calls it";
  }
}

// Evaluated when GoogleTest registers the tests, after every case file's registration ran.
INSTANTIATE_TEST_SUITE_P(Backends, KernelOps, ::testing::ValuesIn(every_case_on_every_backend()),
                         [](const ::testing::TestParamInfo<CaseOnBackend>& info) {
                           return std::string(info.param.backend->name) + "_" +
                                  info.param.kernel_case->name;
                         });

TEST(KernelHarness, EverySlotHasACase) {
  std::set<std::string> covered;
  for (const KernelCase& c : kernel_cases()) covered.insert(c.slots.begin(), c.slots.end());
  for (const char* slot : kSlotNames)
    EXPECT_TRUE(covered.count(slot)) << "slot " << slot << " has no case in tests/kernels/";
}

TEST(KernelHarness, CaseNamesAreUniqueIdentifiers) {
  std::set<std::string> names;
  for (const KernelCase& c : kernel_cases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "two cases named " << c.name;
    EXPECT_FALSE(c.name.empty());
    for (char ch : c.name)
      EXPECT_TRUE((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_') << c.name;
    EXPECT_FALSE(c.slots.empty()) << c.name;
  }
}

}  // namespace

bool add_kernel_cases(std::vector<KernelCase> cases) {
  for (KernelCase& c : cases) registry().push_back(std::move(c));
  return true;
}

const std::vector<KernelCase>& kernel_cases() { return registry(); }

void check_backward(const Kernels& k, const Reference& f, const std::vector<Floats>& inputs,
                    const Vec& w, const Backward& backward) {
  std::vector<Vec> inputs64;
  for (const Floats& x : inputs) inputs64.push_back(to_double(x));
  std::vector<Vec> expected;
  for (size_t i = 0; i < inputs.size(); ++i)
    expected.push_back(numerical_gradient(f, inputs64, i, w));

  std::vector<Floats> base;
  std::vector<FloatBuffer> grads;
  std::vector<float*> pointers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    base.push_back(random_floats(static_cast<int64_t>(inputs[i].size()), 900 + i));
    grads.emplace_back(k, base[i]);
    pointers.push_back(grads[i].data());
  }
  backward(pointers);
  backward(pointers);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Floats twice = grads[i].host();
    Floats added(twice.size());
    for (size_t j = 0; j < added.size(); ++j) added[j] = (twice[j] - base[i][j]) / 2;
    EXPECT_LT(relative_error(added, expected[i]), kGradientTolerance)
        << "gradient " << i << ", accumulated twice";
  }

  for (size_t i = 0; i < inputs.size(); ++i) {
    FloatBuffer alone(k, static_cast<int64_t>(inputs[i].size()));
    std::vector<float*> only(inputs.size(), nullptr);
    only[i] = alone.data();
    backward(only);
    EXPECT_LT(relative_error(alone.host(), expected[i]), kGradientTolerance)
        << "gradient " << i << ", requested alone";
  }
}

}  // namespace tessel::testing
