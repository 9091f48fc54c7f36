;;; dg-eglot-test.el --- drive dg-lsp through eglot in `emacs --batch' -*- lexical-binding: t -*-

;; Used by tests/editors/test_emacs.py: Emacs 28 with Debian's elpa-eglot (1.9) against the real dg-lsp server.
;; The commands are eglot's own, called as a user calls them (`C-u M-x eglot-code-actions', with the region or
;; the symbol at point as eglot computes them); each scenario writes one JSON line (the buffer before and after,
;; the cursor) to $DG_TEST_OUT, and the Python test judges it.
;;
;; Environment: DG_TEST_PYTHON (the interpreter that runs `-m dg_lsp'), DG_TEST_FILE (the file to edit),
;; DG_TEST_OUT (where results go), DG_TEST_ENCODING (utf-8, utf-16 or utf-32), DG_TEST_SCENARIOS (names, spaces
;; between), DG_TEST_TIMEOUT (seconds to wait for the server's answers).
;;
;; Eglot 1.9 always counts columns in UTF-16 and does not offer `general.positionEncodings'. For utf-8 and utf-32
;; this file offers that encoding and installs column functions that count in it, as Emacs 29's eglot does
;; (`eglot-utf-8-linepos', `eglot-utf-32-linepos'); the test checks that the server chose it.

(require 'cl-lib)
(require 'eglot)
(require 'json)

(prefer-coding-system 'utf-8)

(defvar dg-test-encoding (or (getenv "DG_TEST_ENCODING") "utf-16"))
(defvar dg-test-timeout (string-to-number (or (getenv "DG_TEST_TIMEOUT") "120")))
(defvar dg-test-state nil "The `state' of the last dg/status.")
(defvar dg-test-statuses nil "The `request' objects of dg/status notifications, newest first.")

;; A fill on a busy machine can take longer than jsonrpc's 10 s for the synchronous executeCommand.
(setq jsonrpc-default-request-timeout dg-test-timeout
      eglot-connect-timeout dg-test-timeout
      eglot-sync-connect nil
      eglot-autoshutdown t
      eglot-confirm-server-initiated-edits nil)  ; its default asks y-or-n-p before every applyEdit

(add-to-list 'eglot-server-programs
             `((text-mode python-mode) . (,(or (getenv "DG_TEST_PYTHON") "python3") "-m" "dg_lsp")))

(cl-defmethod eglot-handle-notification (_server (_method (eql dg/status)) &key state request &allow-other-keys)
  (setq dg-test-state state)
  (when request (push request dg-test-statuses)))

(cl-defmethod eglot-handle-notification (_server (_method (eql dg/draft)) &rest _) nil)

(cl-defmethod eglot-initialization-options ((_server eglot-lsp-server))
  ;; minConfidence 0: these scenarios check where fills land, not whether the shipped model's gate shows them
  '(:debounceMs 0 :device "cpu" :minConfidence 0))

;; -- position encodings ------------------------------------------------------------------------------------------

(cl-defmethod eglot-client-capabilities :around ((_server eglot-lsp-server))
  (append (cl-call-next-method) `(:general (:positionEncodings [,dg-test-encoding]))))

(defun dg-test-utf-8-column ()
  (length (encode-coding-region (line-beginning-position) (point) 'utf-8 t)))

(defun dg-test-move-to-utf-8-column (column)
  (let ((eol (line-end-position)))
    (beginning-of-line)
    (while (and (< (point) eol) (<= (+ (dg-test-utf-8-column)
                                       (length (encode-coding-string (string (char-after)) 'utf-8 t)))
                                    column))
      (forward-char 1))))

(pcase dg-test-encoding
  ("utf-8" (setq eglot-current-column-function #'dg-test-utf-8-column
                 eglot-move-to-column-function #'dg-test-move-to-utf-8-column))
  ("utf-32" (setq eglot-current-column-function #'eglot-current-column
                  eglot-move-to-column-function #'eglot-move-to-column)))

;; -- helpers -----------------------------------------------------------------------------------------------------

(defun dg-test-wait (pred what)
  "Run the event loop until PRED is true; signal an error naming WHAT after `dg-test-timeout' seconds."
  (let ((deadline (+ (float-time) dg-test-timeout)))
    (while (not (funcall pred))
      (when (> (float-time) deadline) (error "Timed out waiting for %s" what))
      (accept-process-output nil 0.05))))

(defun dg-test-text () (buffer-substring-no-properties (point-min) (point-max)))

(defun dg-test-emit (alist)
  (let ((coding-system-for-write 'utf-8))
    (write-region (concat (json-encode alist) "\n") nil (getenv "DG_TEST_OUT") 'append 'silent)))

(defun dg-test-flush ()
  "Send the pending didChange now (eglot sends it from an idle timer, which batch mode never runs)."
  (eglot--signal-textDocument/didChange))

(defun dg-test-undo ()
  "One `undo', as the user's next command after the edit."
  (undo-boundary)
  (let ((last-command nil)) (undo))
  (undo-boundary))

(defun dg-test-reset (text)
  "Put TEXT back (the next scenario starts from the file's text) and tell the server."
  (erase-buffer)
  (insert text)
  (undo-boundary)
  (dg-test-flush))

(defun dg-test-type (string)
  "Type STRING at point, one self-inserted character at a time, and send the didChange."
  (undo-boundary)
  (dolist (ch (string-to-list string))
    (let ((last-command-event ch)) (self-insert-command 1)))
  (undo-boundary)
  (dg-test-flush))

(defun dg-test-titles (beg end &optional kind)
  (vconcat (mapcar (lambda (a) (plist-get a :title)) (eglot-code-actions beg end kind))))

(defun dg-test-run-action (kind)
  "`C-u M-x eglot-code-actions' KIND on the region or the symbol at point (`eglot--region-bounds'). The command
is synchronous and the server applies its edit before it answers: the buffer is final when this returns. Returns
the command's result as an alist (applied, reason) for the record."
  (undo-boundary)
  (let ((result (apply #'eglot-code-actions (append (eglot--region-bounds) (list kind t)))))
    `((applied . ,(plist-get result :applied)) (reason . ,(plist-get result :reason)))))

(defun dg-test-result (name before start end &rest more)
  "Emit scenario NAME: BEFORE (the text), START..END (0-based character offsets: the cursor, or the selection),
the text after the action, after one undo, and MORE."
  (let ((filled (dg-test-text)))
    (dg-test-undo)
    (dg-test-emit `((scenario . ,name) (encoding . ,dg-test-encoding) (before . ,before) (start . ,start)
                    (end . ,end) (filled . ,filled) (undone . ,(dg-test-text)) ,@more))))

;; -- scenarios ---------------------------------------------------------------------------------------------------
;; Each starts from the file's text (`dg-test-main' puts it back after each).

(defun dg-test-fill ()
  "Fill hole at the end of the last line, with no region (eglot sends the symbol at point)."
  (goto-char (point-max)) (skip-chars-backward "\n") (deactivate-mark)
  (let* ((before (dg-test-text)) (cursor (1- (point)))
         (bounds (eglot--region-bounds))
         (titles (apply #'dg-test-titles bounds))
         (result (dg-test-run-action "quickfix")))
    (dg-test-result "fill" before cursor cursor `(titles . ,titles) `(result . ,result)
                    `(sentRange . ,(vector (1- (car bounds)) (1- (cadr bounds)))))))

(defun dg-test-rewrite ()
  "Rewrite selection with the second line and the third up to its end selected."
  (goto-char (point-min)) (forward-line 1)
  (let ((beg (point)) (before (dg-test-text)))
    (forward-line 1) (end-of-line)
    (push-mark beg t t)
    (let ((titles (dg-test-titles (region-beginning) (region-end)))
          (end (1- (point))))
      (let ((result (dg-test-run-action "refactor.rewrite")))
        (deactivate-mark)
        (dg-test-result "rewrite" before (1- beg) end `(titles . ,titles) `(result . ,result))))))

(defun dg-test-edit-then-fill ()
  "Type ` sum(val' at the end of the first line, then Fill hole with no region: the fill goes after `val'."
  (goto-char (point-min)) (end-of-line) (deactivate-mark)
  (dg-test-type " sum(val")
  (let* ((before (dg-test-text)) (cursor (1- (point)))
         (bounds (eglot--region-bounds))
         (titles (apply #'dg-test-titles bounds))
         (result (dg-test-run-action "quickfix")))
    (dg-test-result "edit-then-fill" before cursor cursor `(titles . ,titles) `(result . ,result)
                    `(sentRange . ,(vector (1- (car bounds)) (1- (cadr bounds)))))))

(defun dg-test-complete ()
  "Type ` sum(val' at the end of the first line, then `completion-at-point': the item survives eglot's filter
by the word at point and inserts after `val'."
  (goto-char (point-min)) (end-of-line) (deactivate-mark)
  (dg-test-type " sum(val")
  (let* ((before (dg-test-text)) (cursor (1- (point)))
         (capf (eglot-completion-at-point))
         (probe (buffer-substring-no-properties (nth 0 capf) (point)))
         (found (all-completions probe (nth 2 capf))))
    (undo-boundary)
    (completion-at-point)
    (dg-test-result "complete" before cursor cursor `(probe . ,probe) `(found . ,(vconcat found)))))

(defun dg-test-decline ()
  "Fill hole, and the user answers `n' to eglot's \"Server wants to edit\" question: eglot answers the server's
workspace/applyEdit with an error; the command's result is applied false with the reason, the text unchanged."
  (goto-char (point-max)) (skip-chars-backward "\n") (deactivate-mark)
  (let* ((before (dg-test-text))
         (action (car (apply #'eglot-code-actions (append (eglot--region-bounds) (list "quickfix")))))
         (command (or (plist-get action :command) action))
         (asked nil)
         (result (let ((eglot-confirm-server-initiated-edits 'confirm))
                   (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) (setq asked t) nil)))
                     (eglot-execute-command (eglot-current-server) (intern (plist-get command :command))
                                            (plist-get command :arguments))))))
    (dg-test-emit `((scenario . "decline") (encoding . ,dg-test-encoding) (asked . ,asked)
                    (applied . ,(plist-get result :applied)) (reason . ,(plist-get result :reason))
                    (unchanged . ,(equal before (dg-test-text)))))))

(defun dg-test-main ()
  (find-file (getenv "DG_TEST_FILE"))
  (transient-mark-mode 1)
  (buffer-enable-undo)
  (apply #'eglot--connect (eglot--guess-contact))
  (dg-test-wait (lambda () (and (eglot-current-server) (equal dg-test-state "ready"))) "the server to be ready")
  (let ((caps (eglot--capabilities (eglot-current-server))))
    (dg-test-emit `((scenario . "connected") (encoding . ,dg-test-encoding)
                    (positionEncoding . ,(plist-get caps :positionEncoding))
                    (codeActionKinds . ,(plist-get (plist-get caps :codeActionProvider) :codeActionKinds)))))
  (dolist (name (split-string (or (getenv "DG_TEST_SCENARIOS") "fill rewrite edit-then-fill")))
    (let ((original (dg-test-text)))
      (condition-case err
          (funcall (intern (concat "dg-test-" name)))
        (error (dg-test-emit `((scenario . ,name) (error . ,(error-message-string err))))))
      (unless (equal original (dg-test-text)) (dg-test-reset original))))
  (let ((server (eglot-current-server)))
    (when server (eglot-shutdown server))))

(provide 'dg-eglot-test)
;;; dg-eglot-test.el ends here
