;; A wasm proc (a WASI command): sends "hello from wasm" to mailbox
;; `inbox` with the host call `tabos.send`, then exits with that call's
;; errno (0 when it was sent).
;;   tabos mailbox create inbox
;;   tabos spawn --kind wasm --wait --upload examples/hello-proc.wat -- ./hello-proc.wat
;;   tabos recv inbox                             # hello from wasm
(module
  (import "tabos" "send"
    (func $send (param i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "inbox")
  (data (i32.const 16) "hello from wasm")
  (func (export "_start")
    ;; send(to, to_len, data, data_len, message_id, message_id_len)
    (call $exit
      (call $send (i32.const 0) (i32.const 5) (i32.const 16) (i32.const 15)
                  (i32.const 0) (i32.const 0)))))
