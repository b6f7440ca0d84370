// The build is the same bytes in any checkout's folder (tests/lab/test_labextension_build.py compares
// it with the committed one): module and chunk ids by order, not by a hash of each module's absolute
// path; modules named by the path they were found at; and no minifier, whose short names were seen to
// differ between two builds of the same sources (the bundle is a few tens of kB either way).
module.exports = {
  optimization: { moduleIds: 'natural', chunkIds: 'natural', minimize: false },
  resolve: { symlinks: false }
};
