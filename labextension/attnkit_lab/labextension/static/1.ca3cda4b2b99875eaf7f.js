"use strict";
(Array.isArray(self["webpackChunkattnkit_labextension"]) ? self["webpackChunkattnkit_labextension"] : (self["webpackChunkattnkit_labextension"] = [])).push([[1],{

/***/ 2
(__unused_webpack_module, __webpack_exports__, __webpack_require__) {

__webpack_require__.r(__webpack_exports__);
/* harmony import */ var _jupyterlab_apputils__WEBPACK_IMPORTED_MODULE_0__ = __webpack_require__(3);
/* harmony import */ var _jupyterlab_coreutils__WEBPACK_IMPORTED_MODULE_1__ = __webpack_require__(4);
/* harmony import */ var _jupyterlab_notebook__WEBPACK_IMPORTED_MODULE_2__ = __webpack_require__(5);
/* harmony import */ var _jupyterlab_services__WEBPACK_IMPORTED_MODULE_3__ = __webpack_require__(6);
/* harmony import */ var _lumino_widgets__WEBPACK_IMPORTED_MODULE_4__ = __webpack_require__(7);





// The words of the last answer of the server (the command's label is asked for before any notebook is open).
let currentLabels = {};
const POLL_MS = Number(_jupyterlab_coreutils__WEBPACK_IMPORTED_MODULE_1__.PageConfig.getOption('attnkitPollMs') || '2000');
const MARK_CLASS = 'attnkit-marked';
const NOTE_CLASS = 'attnkit-mark';
function format(template, values) {
    return (template || '').replace(/\{(\w+)\}/g, (whole, name) => (name in values ? String(values[name]) : whole));
}
/** nbgrader's timestamp ("2026-12-07 16:59:19.383657 UTC", or with an offset) in the reader's own time zone. */
function localTime(stamp) {
    const found = /^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(\.\d{1,3})?\d*\s*(UTC|Z|[+-]\d\d:?\d\d)?$/.exec(stamp.trim());
    if (!found) {
        return stamp;
    }
    const zone = !found[4] || found[4] === 'UTC' ? 'Z' : found[4];
    const moment = new Date(`${found[1]}T${found[2]}${found[3] || ''}${zone}`);
    return isNaN(moment.getTime()) ? stamp : moment.toLocaleString();
}
function points(value) {
    return String(Math.round(value * 100) / 100);
}
async function ask(path, init = {}) {
    const settings = _jupyterlab_services__WEBPACK_IMPORTED_MODULE_3__.ServerConnection.makeSettings();
    const url = _jupyterlab_coreutils__WEBPACK_IMPORTED_MODULE_1__.URLExt.join(settings.baseUrl, 'attnkit-lab', path);
    const answer = await _jupyterlab_services__WEBPACK_IMPORTED_MODULE_3__.ServerConnection.makeRequest(url, init, settings);
    if (!answer.ok) {
        return null;
    }
    return (await answer.json());
}
/** The assignment of a notebook: the name of the folder it is in (nbgrader's fetched layout). */
function assignmentOf(path) {
    const parts = path.split('/');
    return parts.length >= 2 ? parts[parts.length - 2] : '';
}
/** The page of one submission in an iframe that runs nothing (sandbox without allow-scripts). */
class FeedbackFrame extends _lumino_widgets__WEBPACK_IMPORTED_MODULE_4__.Widget {
    constructor(src) {
        super();
        this.addClass('attnkit-feedback');
        const frame = document.createElement('iframe');
        frame.setAttribute('sandbox', '');
        frame.src = src;
        this.node.appendChild(frame);
    }
}
/** What the extension keeps for one open notebook. */
class Watch {
    constructor(app, panel, assignment) {
        var _a;
        this.app = app;
        this.panel = panel;
        this.assignment = assignment;
        this.known = new Map(); // submission key -> ready, as last seen
        this.first = true;
        this.timer = 0;
        this.marked = '';
        this.labels = {};
        this.channel = 'none';
        this.line = new _lumino_widgets__WEBPACK_IMPORTED_MODULE_4__.Widget();
        this.line.addClass('attnkit-attempts');
        this.line.node.hidden = true;
        panel.toolbar.addItem('attnkit-attempts', this.line);
        panel.disposed.connect(() => window.clearTimeout(this.timer));
        (_a = panel.content.model) === null || _a === void 0 ? void 0 : _a.cells.changed.connect(() => {
            this.marked = ''; // cells moved or added: mark again at the next look
        });
        void this.look();
    }
    /** Ask soon (after a submit from this extension). */
    soon() {
        window.clearTimeout(this.timer);
        this.timer = window.setTimeout(() => void this.look(), 200);
    }
    async look() {
        try {
            const state = await ask(`state?assignment=${encodeURIComponent(this.assignment)}`);
            if (this.panel.isDisposed) {
                return;
            }
            if (state) {
                this.labels = state.labels;
                currentLabels = state.labels;
                this.channel = state.channel;
                this.showLimit(state.limit);
                for (const submission of state.submissions) {
                    const before = this.known.get(submission.key);
                    if (submission.ready && !before && !this.first) {
                        this.notify(submission);
                    }
                    this.known.set(submission.key, submission.ready);
                }
                const ready = state.submissions.filter(s => s.ready);
                if (ready.length) {
                    await this.mark(ready[ready.length - 1].key);
                }
                this.first = false;
            }
        }
        catch (error) {
            // An answer of another shape (the server checks the marks it passes on): this look is
            // skipped, the next one still comes.
            console.debug('attnkit: state', error);
        }
        if (!this.panel.isDisposed) {
            this.timer = window.setTimeout(() => void this.look(), POLL_MS);
        }
    }
    showLimit(limit) {
        const node = this.line.node;
        if (!limit || this.channel === 'none') {
            node.hidden = true;
            return;
        }
        node.hidden = false;
        if (!limit.attempts) {
            node.textContent = this.labels.no_limit || '';
            node.dataset.left = '';
            return;
        }
        const now = Date.now() / 1000;
        const counted = limit.counted.filter(t => t > now - limit.window_seconds).sort((a, b) => a - b);
        const left = Math.max(0, limit.attempts - counted.length);
        let text = format(this.labels.left, { left, attempts: limit.attempts, hours: points(limit.window_seconds / 3600) });
        node.dataset.left = String(left);
        delete node.dataset.next;
        if (left === 0) {
            const next = counted[counted.length - limit.attempts] + limit.window_seconds;
            node.dataset.next = String(Math.round(next));
            text += ' · ' + format(this.labels.next, { time: new Date(next * 1000).toLocaleString() });
        }
        node.textContent = text;
    }
    notify(submission) {
        const when = localTime(submission.timestamp);
        _jupyterlab_apputils__WEBPACK_IMPORTED_MODULE_0__.Notification.info(format(this.labels.ready, { assignment: this.assignment, time: when }), {
            autoClose: false,
            actions: [{ label: this.labels.open || 'Open', callback: () => this.open(submission.key) }]
        });
    }
    open(key) {
        const settings = _jupyterlab_services__WEBPACK_IMPORTED_MODULE_3__.ServerConnection.makeSettings();
        const query = `key=${encodeURIComponent(key)}&channel=${this.channel}`;
        const frame = new FeedbackFrame(_jupyterlab_coreutils__WEBPACK_IMPORTED_MODULE_1__.URLExt.join(settings.baseUrl, 'attnkit-lab', `page?${query}`));
        const panel = new _jupyterlab_apputils__WEBPACK_IMPORTED_MODULE_0__.MainAreaWidget({ content: frame });
        panel.id = `attnkit-feedback-${Date.now()}`;
        panel.title.label = `${this.labels.panel || 'Feedback'} · ${this.assignment}`;
        panel.title.closable = true;
        this.app.shell.add(panel, 'main', { mode: 'split-right', ref: this.panel.id });
    }
    /** Decorate the cells that define graded functions with the marks of submission ``key``. */
    async mark(key) {
        if (this.marked === key) {
            return;
        }
        const marks = await ask(`marks?key=${encodeURIComponent(key)}&channel=${this.channel}`);
        if (!marks || marks.format !== 1) {
            return;
        }
        const labels = { ...this.labels, ...marks.labels };
        const byName = new Map(marks.functions.map(m => [m.function, m]));
        for (const cell of this.panel.content.widgets) {
            cell.node.classList.remove(MARK_CLASS, 'attnkit-full', 'attnkit-lost');
            cell.node.querySelectorAll(`.${NOTE_CLASS}`).forEach(node => node.remove());
            delete cell.node.dataset.attnkitFunction;
            if (cell.model.type !== 'code') {
                continue;
            }
            const source = cell.model.sharedModel.getSource();
            const defined = /^def\s+([A-Za-z_]\w*)\s*\(/gm;
            let found;
            let mark;
            while ((found = defined.exec(source)) && !mark) {
                mark = byName.get(found[1]);
            }
            if (!mark) {
                continue;
            }
            cell.node.classList.add(MARK_CLASS, mark.full ? 'attnkit-full' : 'attnkit-lost');
            cell.node.dataset.attnkitFunction = mark.function;
            const note = document.createElement('div');
            note.className = NOTE_CLASS;
            const head = document.createElement('div');
            head.className = 'attnkit-mark-score';
            const values = { score: points(mark.score), max_score: points(mark.max_score), lost: points(mark.max_score - mark.score) };
            head.textContent = format(mark.full ? labels.full : labels.lost, values);
            note.appendChild(head);
            for (const diagnosis of mark.diagnoses) {
                const line = document.createElement('div');
                line.className = 'attnkit-mark-diagnosis';
                line.dataset.diagnosis = diagnosis.id;
                line.textContent = format(labels.diagnosis, { text: diagnosis.text });
                const section = document.createElement('div');
                section.className = 'attnkit-mark-section';
                section.textContent = format(labels.section, { section: diagnosis.section });
                note.append(line, section);
            }
            if (mark.first_failure) {
                const failed = document.createElement('details');
                failed.className = 'attnkit-mark-check';
                const summary = document.createElement('summary');
                summary.textContent = format(labels.first_failure, { check: mark.first_failure.check });
                const said = document.createElement('pre');
                said.textContent = mark.first_failure.said;
                failed.append(summary, said);
                note.appendChild(failed);
            }
            cell.node.insertBefore(note, cell.node.firstChild);
        }
        this.marked = key;
    }
}
const plugin = {
    id: 'attnkit-labextension:plugin',
    description: 'The feedback of a submit: a notification, a panel, marks beside the code.',
    autoStart: true,
    requires: [_jupyterlab_notebook__WEBPACK_IMPORTED_MODULE_2__.INotebookTracker],
    activate: (app, tracker) => {
        const watches = new WeakMap();
        tracker.widgetAdded.connect((_, panel) => {
            void panel.context.ready.then(() => {
                const assignment = assignmentOf(panel.context.path);
                if (assignment) {
                    watches.set(panel, new Watch(app, panel, assignment));
                }
            });
        });
        app.commands.addCommand('attnkit:submit', {
            label: () => currentLabels.submit || 'Submit for feedback',
            isEnabled: () => !!tracker.currentWidget,
            execute: async () => {
                const panel = tracker.currentWidget;
                if (!panel) {
                    return;
                }
                await panel.context.save();
                const done = await ask('submit', {
                    method: 'POST',
                    body: JSON.stringify({ path: panel.context.path })
                });
                const watch = watches.get(panel);
                if (done && done.success) {
                    _jupyterlab_apputils__WEBPACK_IMPORTED_MODULE_0__.Notification.info(currentLabels.submitted || 'Submitted', { autoClose: 5000 });
                    watch === null || watch === void 0 ? void 0 : watch.soon();
                }
                else {
                    _jupyterlab_apputils__WEBPACK_IMPORTED_MODULE_0__.Notification.error(done ? done.output : 'nbgrader submit failed', { autoClose: false });
                }
            }
        });
        app.commands.addKeyBinding({ command: 'attnkit:submit', keys: ['Accel Shift S'], selector: '.jp-Notebook' });
    }
};
/* harmony default export */ const __WEBPACK_DEFAULT_EXPORT__ = (plugin);

/* harmony export */ __webpack_require__.d(__webpack_exports__, [
/* harmony export */   "default", 0, __WEBPACK_DEFAULT_EXPORT__
/* harmony export */ ]);


/***/ }

}]);