# Debian packages the library builds against (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(CURL REQUIRED)  # store/: ingest from http(s) URLs with Range requests

add_library(df_deps INTERFACE)
target_link_libraries(df_deps INTERFACE Threads::Threads nlohmann_json::nlohmann_json CURL::libcurl)

# io_uring is optional at build time and at run time: reads fall back to a pread pool.
pkg_check_modules(URING IMPORTED_TARGET liburing)
if(URING_FOUND)
  target_link_libraries(df_deps INTERFACE PkgConfig::URING)
  target_compile_definitions(df_deps INTERFACE DISKFORMER_HAVE_URING=1)
endif()

# tokenizer/: pre-tokenizer regexes with Unicode categories (UTF + UCP).
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
target_link_libraries(df_deps INTERFACE PkgConfig::PCRE2)

# server/: the HTTP server (Debian's cpp-httplib, built as a shared library; its pkg-config flags select the same
# configuration the library was compiled with, which its header's class layouts depend on).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
