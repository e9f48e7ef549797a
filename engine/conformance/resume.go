package conformance

// EnvResumeSkip names a file of spec full texts, one a line, that an earlier run of a suite
// reported before a hang aborted it: dist/run restarts the suite with it (tools/bundle/resume)
// and the suite skips those specs with ResumeSkipMessage, so a hang costs only its own spec.
const EnvResumeSkip = "TOUCHSTONE_RESUME_SKIP"

// ResumeSkipMessage is the skip message of a spec that an earlier run of its suite reported;
// tools/bundle/resume keeps that run's verdict when it merges the reports.
const ResumeSkipMessage = "resumed after a hang: reported by an earlier run of this suite"
