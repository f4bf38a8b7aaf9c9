;; A stored procedure in WebAssembly (text form): returns its arguments.
;; main gets the arguments' length; `args` copies them into memory and
;; `result` sets the call's result; a status other than 0 aborts the call.
;;   tabos procedure install echo examples/echo.wat
;;   tabos procedure call echo hello             # hello
(module
  (import "tabos" "args" (func $args (param i32 i32) (result i32)))
  (import "tabos" "result" (func $result (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "main") (param $len i32) (result i32)
    (if (i32.gt_u (local.get $len) (i32.const 65536)) (then (return (i32.const 1))))
    (drop (call $args (i32.const 0) (local.get $len)))
    (drop (call $result (i32.const 0) (local.get $len)))
    (i32.const 0)))
