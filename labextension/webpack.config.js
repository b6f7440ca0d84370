// Module and chunk ids by order, not by a hash of each module's absolute path: the build is then the
// same in any checkout's folder (make test compares it with the committed one).
module.exports = {
  optimization: { moduleIds: 'natural', chunkIds: 'natural' }
};
