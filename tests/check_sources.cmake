# Checks the source tree as text, so that the architecture and the citation
# rule cannot drift silently (run by CTest as SourceTree.LayeringAndCitations):
#  1. every #include "<folder>/..." points down the dependency direction
#     {app, python} -> {sweep, report, bench, census} -> twins ->
#     {model, optim, data}, census -> bridge -> twins (python/: the
#     `import twins` module, a front end beside app/; census/: the census's
#     catalogue, which reaches sweep and report only inside their requests);
#  2. no source cites a document outside the repository ("PROTOCOL §n",
#     "PROTOCOL.md") or an issue number ("issue 6"): comments cite
#     docs/protocol.md and say the reason;
#  3. a source that calls fmt::join includes <fmt/ranges.h>, where fmt 11
#     and later (the fmt a torch wheel bundles) declare it: Debian's fmt 9
#     has it in <fmt/format.h>, so only the CUDA build would see it missing.
# Usage: cmake -DSOURCE_DIR=<repo> -P check_sources.cmake
cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...)
set(allowed_model model)
set(allowed_data data)
set(allowed_optim optim)
set(allowed_twins twins model optim data)
set(allowed_sweep sweep twins model optim data)
set(allowed_report report twins model optim data)
set(allowed_bench bench twins model optim data)
set(allowed_bridge bridge twins model optim data)
set(allowed_census census bridge twins model optim data)
set(allowed_app app sweep report bench census bridge twins model optim data)
set(allowed_python python sweep report bench census bridge twins model optim data)
set(folders model data optim twins sweep report bench bridge census app python)

if(NOT EXISTS "${SOURCE_DIR}/twins/pair.h")
  message(FATAL_ERROR "SOURCE_DIR '${SOURCE_DIR}' is not the twins source tree")
endif()
set(problems "")
set(checked 0)
foreach(folder ${folders})
  file(GLOB files ${SOURCE_DIR}/${folder}/*.h ${SOURCE_DIR}/${folder}/*.cpp)
  list(LENGTH files n)
  math(EXPR checked "${checked} + ${n}")
  foreach(file ${files})
    file(STRINGS ${file} lines)
    file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
    file(READ ${file} text)
    if(text MATCHES "fmt::join" AND NOT text MATCHES "#include <fmt/ranges.h>")
      list(APPEND problems "${rel}: calls fmt::join without #include <fmt/ranges.h>")
    endif()
    foreach(line IN LISTS lines)
      if(line MATCHES "^#include \"([a-z]+)/")
        set(target ${CMAKE_MATCH_1})
        set(allowed ${allowed_${folder}})
        if(target IN_LIST folders AND NOT target IN_LIST allowed)
          list(APPEND problems "${rel}: includes ${target}/ against the direction")
        endif()
      endif()
      if(line MATCHES "PROTOCOL( §|\\.md)" OR line MATCHES "[Ii]ssue #?[0-9]")
        list(APPEND problems "${rel}: cites '${CMAKE_MATCH_0}' (cite docs/protocol.md, or say the reason)")
      endif()
    endforeach()
  endforeach()
endforeach()
# The Python sources (the package, the bridge's conventions) follow the
# citation rule too.
file(GLOB python_files ${SOURCE_DIR}/bridge/*.py ${SOURCE_DIR}/census/*.py
     ${SOURCE_DIR}/python/twins/*.py)
foreach(file ${python_files})
  file(STRINGS ${file} lines)
  file(RELATIVE_PATH rel ${SOURCE_DIR} ${file})
  math(EXPR checked "${checked} + 1")
  foreach(line IN LISTS lines)
    if(line MATCHES "PROTOCOL( §|\\.md)" OR line MATCHES "[Ii]ssue #?[0-9]")
      list(APPEND problems "${rel}: cites '${CMAKE_MATCH_0}' (cite docs/protocol.md, or say the reason)")
    endif()
  endforeach()
endforeach()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "source tree check failed:\n  ${text}")
endif()
message(STATUS "source tree: ${checked} files; every include follows the direction; no outside citations; fmt::join with <fmt/ranges.h>")
