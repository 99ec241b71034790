// Include FIRST (before any protobuf header) in a file that uses a protobuf
// map field (e.g. google.protobuf.Struct's `fields`), so it also works under
// ThreadSanitizer.
//
// Protobuf 3.21's map_field.h gives MapFieldBase two extra members (seq1_,
// seq2_) when __SANITIZE_THREAD__ is defined. Debian's libprotobuf is built
// without TSan, so its MapFieldBase (and Struct, compiled into it) has the
// plain layout; code compiled with -fsanitize=thread then reads the map at
// the wrong offset and crashes (SEGV in Map::find; //server:status_page_test
// did). Here map_field.h is read once with the macro hidden, so every later
// include sees the library's layout; the macro is restored for everything
// else. It changes nothing in builds without TSan.
#ifndef LOCKSTEP_TESTS_TSAN_PROTOBUF_MAP_ABI_H_
#define LOCKSTEP_TESTS_TSAN_PROTOBUF_MAP_ABI_H_

#ifdef GOOGLE_PROTOBUF_MAP_FIELD_H__
#error "include tests/tsan/protobuf_map_abi.h before any protobuf header"
#endif
#pragma push_macro("__SANITIZE_THREAD__")
#undef __SANITIZE_THREAD__
#include <google/protobuf/map_field.h>
#pragma pop_macro("__SANITIZE_THREAD__")

#endif  // LOCKSTEP_TESTS_TSAN_PROTOBUF_MAP_ABI_H_
