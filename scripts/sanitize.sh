#!/usr/bin/env bash
# Runs nvmeio's test suite under AddressSanitizer+UndefinedBehaviorSanitizer and under
# ThreadSanitizer (one build directory each), then a subset under valgrind memcheck.
# Exits non-zero on any finding. Usage: scripts/sanitize.sh [asan] [tsan] [valgrind]
# (default: all three). ASan builds with clang++ as C++20, TSan with g++ as C++20 and valgrind's
# subset with g++ as C++17; CXX, if set, is used for all three instead. Build dirs are
# build-asan, build-tsan and build-valgrind under the source tree (override the parent with
# NVMEIO_SANITIZE_DIR).
set -euo pipefail

source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
parent="${NVMEIO_SANITIZE_DIR:-$source_dir}"
jobs="${NVMEIO_SANITIZE_JOBS:-2}"
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(asan tsan valgrind)


# Build type None: only the flags given here. -O0 -g1 compiles about three times faster than
# -O1 -g, and the tests spend their time waiting for the disk, not computing.
configure_and_build() {  # dir compiler flags standard [targets]
    local dir="$1" compiler="${CXX:-$2}" flags="$3" standard="$4" targets="${5:-nvmeio_tests}"
    # A tree configured before with another compiler keeps it whatever CXX says: start it afresh.
    local cached
    cached="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$dir/CMakeCache.txt" 2>/dev/null || true)"
    if [[ -n "$cached" && "$(readlink -f "$cached")" != "$(readlink -f "$(command -v "$compiler")")" ]]; then
        rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
    fi
    CXX="$compiler" cmake -S "$source_dir" -B "$dir" -DCMAKE_BUILD_TYPE=None \
        -DCMAKE_CXX_STANDARD="$standard" \
        -DNVMEIO_BUILD_EXAMPLES=OFF -DNVMEIO_BUILD_BENCH=OFF -DNVMEIO_BUILD_PYTHON=OFF \
        -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
    # nvmeio_tests: every test program, without the header checks the normal build does.
    cmake --build "$dir" -j"$jobs" --target $targets
}

cpu_seconds() {  # user+sys of the finished children of this shell (fields 16, 17 of its stat)
    awk -v tick="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.0f", ($14 + $15) / tick }' "/proc/$$/stat"
}

# The soak's job under a sanitizer is to walk every code path with memory checks on; the full
# byte-exactness run (300 transfers) is in the normal test pass. Likewise fault_test's
# front-end matrices run every third cell here and every cell in the normal pass, and the racing
# writers run 12 rounds per front end and mode here (100 in the normal pass).
run_ctest() {  # dir [labels left out]
    (cd "$1" && NVMEIO_SOAK_TRANSFERS="${NVMEIO_SOAK_TRANSFERS:-100}" \
        NVMEIO_FAULT_STRIDE="${NVMEIO_FAULT_STRIDE:-3}" \
        NVMEIO_WRITERS_ROUNDS="${NVMEIO_WRITERS_ROUNDS:-12}" \
        ctest --output-on-failure --timeout 600 -j"$jobs" -LE "${2:-packaging}")
}

for stage in "${stages[@]}"; do
    start=$SECONDS
    cpu=$(cpu_seconds)
    case "$stage" in
        asan)
            dir="$parent/build-asan"
            # clang++ C++20: that pair's full build and run (scripts/test.sh builds the others),
            # with every public header compiled on its own. clang++ compiles the instrumented
            # tests in about half of g++'s time: its UBSan checks at -O0 are lighter.
            configure_and_build "$dir" clang++ \
                "-O0 -g1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" 20 \
                "nvmeio_tests header_check"
            # detect_leaks: LeakSanitizer checks every test program at exit.
            ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1" \
            UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
                run_ctest "$dir"
            ;;
        tsan)
            dir="$parent/build-tsan"
            # C++20: the g++ C++20 pair's full build and run (scripts/test.sh builds the others),
            # with every public header compiled on its own (header_check) as the other pairs do.
            configure_and_build "$dir" g++ "-O0 -g1 -fsanitize=thread" 20 "nvmeio_tests header_check"
            # Tests labelled one_thread (the comparator's: pure computation, 35-46 s each at -O0
            # under TSan; strategy_test, one context on one thread, 55 s) have no second thread
            # for it to watch; ASan runs them.
            TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$source_dir/tests/tsan.supp" \
                run_ctest "$dir" "packaging|one_thread"
            ;;
        valgrind)
            dir="$parent/build-valgrind"
            tests=(
                "file_test"
                "aio_context_test"
                "strategy_test --run_test=!round_trip_of_64_mib_with_1_mib_blocks_is_byte_exact"
                "fault_test --run_test=io_errors_name_op_file_offset_and_leave_nothing_in_flight*"
                "bad_input_test"
            )
            programs=()
            for t in "${tests[@]}"; do programs+=("${t%% *}"); done
            configure_and_build "$dir" g++ "-O1 -g1" 17 "${programs[*]}"
            # A subset: valgrind is ~30x slower, and libaio's completions are covered by its
            # io_getevents wrapper (it marks read buffers defined).
            vg=(valgrind --quiet --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,indirect,possible
                --errors-for-leak-kinds=definite,indirect,possible --track-fds=yes)
            export NVMEIO_TEST_DIR="$dir/tests/scratch"
            # valgrind does not see the kernel writing read data through io_uring and reports
            # the buffers as uninitialised; ASan and TSan above cover the io_uring backend.
            export NVMEIO_TEST_SKIP_IO_URING="valgrind cannot see io_uring's writes into memory"
            mkdir -p "$NVMEIO_TEST_DIR"
            for t in "${tests[@]}"; do
                read -r -a argv <<<"$t"
                [[ -x "$dir/tests/${argv[0]}" ]] || { echo "valgrind: no $dir/tests/${argv[0]}" >&2; exit 1; }
                echo "valgrind: $t"
                fd_log="$(mktemp)"
                status=0
                "${vg[@]}" --log-file="$fd_log" "$dir/tests/${argv[0]}" "${argv[@]:1}" --log_level=warning \
                    || status=$?
                # 77: nothing failed, and the io_uring cases were skipped (they say so on stderr).
                if [[ $status -ne 0 && $status -ne 77 ]]; then cat "$fd_log"; rm -f "$fd_log"; exit 1; fi
                # --track-fds lists the descriptors open at exit; any that the program did not
                # inherit from its parent is a leak.
                leaked="$(awk '/Open file descriptor [0-9]+:/ { fd = $0; getline next_line;
                                 if (next_line !~ /inherited from parent/) print fd }' "$fd_log")"
                if [[ -n "$leaked" ]]; then
                    cat "$fd_log"; rm -f "$fd_log"; echo "valgrind: $t leaked a descriptor"; exit 1
                fi
                rm -f "$fd_log"
            done
            ;;
        *)
            echo "unknown stage '$stage' (asan, tsan, valgrind)" >&2
            exit 2
            ;;
    esac
    echo "sanitize: $stage passed in $((SECONDS - start)) s, cpu $(($(cpu_seconds) - cpu)) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
done
