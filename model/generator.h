// LibTorch's default CPU generator is one per process: whoever seeds it or
// draws from it while other threads may too holds this mutex. model::build
// does (it seeds the generator with the init seed), and so does a Python
// rule while it runs, with its own random stream swapped in
// (bridge/python_optimizer.cpp, bridge/isolation.py).
#pragma once

#include <mutex>

namespace model {

std::recursive_mutex& default_generator_mutex();

}  // namespace model
