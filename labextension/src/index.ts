/**
 * attnkit's JupyterLab extension (issue 51).
 *
 * For each open notebook of an nbgrader assignment (its folder's name is the assignment, as
 * nbgrader's fetch lays it out), the server extension (attnkit_lab) is asked, every few seconds,
 * for the student's own submissions of that assignment, on the exchange or on `--hub`. A
 * submission whose page turns ready after the notebook was opened brings a notification; its
 * action opens the page in a panel beside the notebook (an iframe, sandboxed, fed by the server
 * extension: no "Trust HTML" step). The latest ready submission's marks decorate the cells that
 * define the graded functions: CSS classes and a note inserted in the cell's DOM, never the
 * cell's model or metadata, so the notebook file is not changed. A line in the notebook's toolbar
 * says how many feedbacks are left in the window and when the next comes, in local time.
 *
 * Every word shown comes from the kit's catalogue through the server (`labels`): the page's language.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { MainAreaWidget, Notification } from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

type Labels = Record<string, string>;

interface ISubmission {
  key: string;
  timestamp: string;
  ready: boolean;
  notebook: string;
}

interface ILimit {
  attempts: number;
  window_seconds: number;
  counted: number[];
}

interface IState {
  channel: 'exchange' | 'hub' | 'none';
  submissions: ISubmission[];
  limit: ILimit | null;
  labels: Labels;
}

interface IDiagnosis {
  id: string;
  text: string;
  section: string;
}

interface IFunctionMark {
  function: string;
  score: number;
  max_score: number;
  full: boolean;
  diagnoses: IDiagnosis[];
  first_failure: { check: string; said: string } | null;
}

interface IMarks {
  format: number;
  shown: string;
  functions: IFunctionMark[];
  labels: Labels;
}

// The words of the last answer of the server (the command's label is asked for before any notebook is open).
let currentLabels: Labels = {};

const POLL_MS = Number(PageConfig.getOption('attnkitPollMs') || '2000');
const MARK_CLASS = 'attnkit-marked';
const NOTE_CLASS = 'attnkit-mark';

function format(template: string | undefined, values: Record<string, string | number>): string {
  return (template || '').replace(/\{(\w+)\}/g, (whole, name) => (name in values ? String(values[name]) : whole));
}

/** nbgrader's timestamp ("2026-12-07 16:59:19.383657 UTC", or with an offset) in the reader's own time zone. */
function localTime(stamp: string): string {
  const found = /^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(\.\d{1,3})?\d*\s*(UTC|Z|[+-]\d\d:?\d\d)?$/.exec(stamp.trim());
  if (!found) {
    return stamp;
  }
  const zone = !found[4] || found[4] === 'UTC' ? 'Z' : found[4];
  const moment = new Date(`${found[1]}T${found[2]}${found[3] || ''}${zone}`);
  return isNaN(moment.getTime()) ? stamp : moment.toLocaleString();
}

function points(value: number): string {
  return String(Math.round(value * 100) / 100);
}

async function ask<T>(path: string, init: RequestInit = {}): Promise<T | null> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'attnkit-lab', path);
  const answer = await ServerConnection.makeRequest(url, init, settings);
  if (!answer.ok) {
    return null;
  }
  return (await answer.json()) as T;
}

/** The assignment of a notebook: the name of the folder it is in (nbgrader's fetched layout). */
function assignmentOf(path: string): string {
  const parts = path.split('/');
  return parts.length >= 2 ? parts[parts.length - 2] : '';
}

/** The page of one submission in an iframe that runs nothing (sandbox without allow-scripts). */
class FeedbackFrame extends Widget {
  constructor(src: string) {
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
  private known = new Map<string, boolean>(); // submission key -> ready, as last seen
  private first = true;
  private timer = 0;
  private marked = '';
  private line: Widget;
  labels: Labels = {};
  channel: IState['channel'] = 'none';

  constructor(
    private app: JupyterFrontEnd,
    private panel: NotebookPanel,
    private assignment: string
  ) {
    this.line = new Widget();
    this.line.addClass('attnkit-attempts');
    this.line.node.hidden = true;
    panel.toolbar.addItem('attnkit-attempts', this.line);
    panel.disposed.connect(() => window.clearTimeout(this.timer));
    panel.content.model?.cells.changed.connect(() => {
      this.marked = ''; // cells moved or added: mark again at the next look
    });
    void this.look();
  }

  /** Ask soon (after a submit from this extension). */
  soon(): void {
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => void this.look(), 200);
  }

  private async look(): Promise<void> {
    try {
      const state = await ask<IState>(`state?assignment=${encodeURIComponent(this.assignment)}`);
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
    } catch (error) {
      // An answer of another shape (the server checks the marks it passes on): this look is
      // skipped, the next one still comes.
      console.debug('attnkit: state', error);
    }
    if (!this.panel.isDisposed) {
      this.timer = window.setTimeout(() => void this.look(), POLL_MS);
    }
  }

  private showLimit(limit: ILimit | null): void {
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

  private notify(submission: ISubmission): void {
    const when = localTime(submission.timestamp);
    Notification.info(format(this.labels.ready, { assignment: this.assignment, time: when }), {
      autoClose: false,
      actions: [{ label: this.labels.open || 'Open', callback: () => this.open(submission.key) }]
    });
  }

  open(key: string): void {
    const settings = ServerConnection.makeSettings();
    const query = `key=${encodeURIComponent(key)}&channel=${this.channel}`;
    const frame = new FeedbackFrame(URLExt.join(settings.baseUrl, 'attnkit-lab', `page?${query}`));
    const panel = new MainAreaWidget({ content: frame });
    panel.id = `attnkit-feedback-${Date.now()}`;
    panel.title.label = `${this.labels.panel || 'Feedback'} · ${this.assignment}`;
    panel.title.closable = true;
    this.app.shell.add(panel, 'main', { mode: 'split-right', ref: this.panel.id });
  }

  /** Decorate the cells that define graded functions with the marks of submission ``key``. */
  private async mark(key: string): Promise<void> {
    if (this.marked === key) {
      return;
    }
    const marks = await ask<IMarks>(`marks?key=${encodeURIComponent(key)}&channel=${this.channel}`);
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
      let found: RegExpExecArray | null;
      let mark: IFunctionMark | undefined;
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

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'attnkit-labextension:plugin',
  description: 'The feedback of a submit: a notification, a panel, marks beside the code.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    const watches = new WeakMap<NotebookPanel, Watch>();
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
        const done = await ask<{ success: boolean; output: string }>('submit', {
          method: 'POST',
          body: JSON.stringify({ path: panel.context.path })
        });
        const watch = watches.get(panel);
        if (done && done.success) {
          Notification.info(currentLabels.submitted || 'Submitted', { autoClose: 5000 });
          watch?.soon();
        } else {
          Notification.error(done ? done.output : 'nbgrader submit failed', { autoClose: false });
        }
      }
    });
    app.commands.addKeyBinding({ command: 'attnkit:submit', keys: ['Accel Shift S'], selector: '.jp-Notebook' });
  }
};

export default plugin;
