"use strict";
(Array.isArray(self["webpackChunkattnkit_labextension"]) ? self["webpackChunkattnkit_labextension"] : (self["webpackChunkattnkit_labextension"] = [])).push([[2],[
/* 0 */,
/* 1 */,
/* 2 */,
/* 3 */,
/* 4 */,
/* 5 */,
/* 6 */,
/* 7 */,
/* 8 */
/***/ ((__unused_webpack_module, __unused_webpack___webpack_exports__, __webpack_require__) => {


// MODULE: ./node_modules/style-loader/dist/runtime/injectStylesIntoStyleTag.js
var injectStylesIntoStyleTag_namespaceFn = /*#__PURE__*/__webpack_require__.cw((module) => {


var stylesInDOM = [];
function getIndexByIdentifier(identifier) {
  var result = -1;
  for (var i = 0; i < stylesInDOM.length; i++) {
    if (stylesInDOM[i].identifier === identifier) {
      result = i;
      break;
    }
  }
  return result;
}
function modulesToDom(list, options) {
  var idCountMap = {};
  var identifiers = [];
  for (var i = 0; i < list.length; i++) {
    var item = list[i];
    var id = options.base ? item[0] + options.base : item[0];
    var count = idCountMap[id] || 0;
    var identifier = "".concat(id, " ").concat(count);
    idCountMap[id] = count + 1;
    var indexByIdentifier = getIndexByIdentifier(identifier);
    var obj = {
      css: item[1],
      media: item[2],
      sourceMap: item[3],
      supports: item[4],
      layer: item[5]
    };
    if (indexByIdentifier !== -1) {
      stylesInDOM[indexByIdentifier].references++;
      stylesInDOM[indexByIdentifier].updater(obj);
    } else {
      var updater = addElementStyle(obj, options);
      options.byIndex = i;
      stylesInDOM.splice(i, 0, {
        identifier: identifier,
        updater: updater,
        references: 1
      });
    }
    identifiers.push(identifier);
  }
  return identifiers;
}
function addElementStyle(obj, options) {
  var api = options.domAPI(options);
  api.update(obj);
  var updater = function updater(newObj) {
    if (newObj) {
      if (newObj.css === obj.css && newObj.media === obj.media && newObj.sourceMap === obj.sourceMap && newObj.supports === obj.supports && newObj.layer === obj.layer) {
        return;
      }
      api.update(obj = newObj);
    } else {
      api.remove();
    }
  };
  return updater;
}
module.exports = function (list, options) {
  options = options || {};
  list = list || [];
  var lastIdentifiers = modulesToDom(list, options);
  return function update(newList) {
    newList = newList || [];
    for (var i = 0; i < lastIdentifiers.length; i++) {
      var identifier = lastIdentifiers[i];
      var index = getIndexByIdentifier(identifier);
      stylesInDOM[index].references--;
    }
    var newLastIdentifiers = modulesToDom(newList, options);
    for (var _i = 0; _i < lastIdentifiers.length; _i++) {
      var _identifier = lastIdentifiers[_i];
      var _index = getIndexByIdentifier(_identifier);
      if (stylesInDOM[_index].references === 0) {
        stylesInDOM[_index].updater();
        stylesInDOM.splice(_index, 1);
      }
    }
    lastIdentifiers = newLastIdentifiers;
  };
};
});

// MODULE: ./node_modules/style-loader/dist/runtime/insertBySelector.js
var insertBySelector_namespaceFn = /*#__PURE__*/__webpack_require__.cw((module) => {


var memo = {};

/* istanbul ignore next  */
function getTarget(target) {
  if (typeof memo[target] === "undefined") {
    var styleTarget = document.querySelector(target);

    // Special case to return head of iframe instead of iframe itself
    if (window.HTMLIFrameElement && styleTarget instanceof window.HTMLIFrameElement) {
      try {
        // This will throw an exception if access to iframe is blocked
        // due to cross-origin restrictions
        styleTarget = styleTarget.contentDocument.head;
      } catch (e) {
        // istanbul ignore next
        styleTarget = null;
      }
    }
    memo[target] = styleTarget;
  }
  return memo[target];
}

/* istanbul ignore next  */
function insertBySelector(insert, style) {
  var target = getTarget(insert);
  if (!target) {
    throw new Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");
  }
  target.appendChild(style);
}
module.exports = insertBySelector;
});

// MODULE: ./node_modules/style-loader/dist/runtime/insertStyleElement.js
var insertStyleElement_namespaceFn = /*#__PURE__*/__webpack_require__.cw((module) => {


/* istanbul ignore next  */
function insertStyleElement(options) {
  var element = document.createElement("style");
  options.setAttributes(element, options.attributes);
  options.insert(element, options.options);
  return element;
}
module.exports = insertStyleElement;
});

// MODULE: ./node_modules/style-loader/dist/runtime/setAttributesWithoutAttributes.js
var setAttributesWithoutAttributes_namespaceFn = /*#__PURE__*/__webpack_require__.cw((module) => {


/* istanbul ignore next  */
function setAttributesWithoutAttributes(styleElement) {
  var nonce =  true ? __webpack_require__.nc : 0;
  if (nonce) {
    styleElement.setAttribute("nonce", nonce);
  }
}
module.exports = setAttributesWithoutAttributes;
});

// MODULE: ./node_modules/style-loader/dist/runtime/styleDomAPI.js
var styleDomAPI_namespaceFn = /*#__PURE__*/__webpack_require__.cw((module) => {


/* istanbul ignore next  */
function apply(styleElement, options, obj) {
  var css = "";
  if (obj.supports) {
    css += "@supports (".concat(obj.supports, ") {");
  }
  if (obj.media) {
    css += "@media ".concat(obj.media, " {");
  }
  var needLayer = typeof obj.layer !== "undefined";
  if (needLayer) {
    css += "@layer".concat(obj.layer.length > 0 ? " ".concat(obj.layer) : "", " {");
  }
  css += obj.css;
  if (needLayer) {
    css += "}";
  }
  if (obj.media) {
    css += "}";
  }
  if (obj.supports) {
    css += "}";
  }
  var sourceMap = obj.sourceMap;
  if (sourceMap && typeof btoa !== "undefined") {
    css += "\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(sourceMap)))), " */");
  }

  // For old IE
  /* istanbul ignore if  */
  options.styleTagTransform(css, styleElement, options.options);
}
function removeStyleElement(styleElement) {
  // istanbul ignore if
  if (styleElement.parentNode === null) {
    return false;
  }
  styleElement.parentNode.removeChild(styleElement);
}

/* istanbul ignore next  */
function domAPI(options) {
  if (typeof document === "undefined") {
    return {
      update: function update() {},
      remove: function remove() {}
    };
  }
  var styleElement = options.insertStyleElement(options);
  return {
    update: function update(obj) {
      apply(styleElement, options, obj);
    },
    remove: function remove() {
      removeStyleElement(styleElement);
    }
  };
}
module.exports = domAPI;
});

// MODULE: ./node_modules/style-loader/dist/runtime/styleTagTransform.js
var styleTagTransform_namespaceFn = /*#__PURE__*/__webpack_require__.cw((module) => {


/* istanbul ignore next  */
function styleTagTransform(css, styleElement) {
  if (styleElement.styleSheet) {
    styleElement.styleSheet.cssText = css;
  } else {
    while (styleElement.firstChild) {
      styleElement.removeChild(styleElement.firstChild);
    }
    styleElement.appendChild(document.createTextNode(css));
  }
}
module.exports = styleTagTransform;
});

;// ./node_modules/style-loader/dist/runtime/injectStylesIntoStyleTag.js
injectStylesIntoStyleTag_namespaceFn();

function injectStylesIntoStyleTag_default() { return injectStylesIntoStyleTag_default.c || (injectStylesIntoStyleTag_default.c = __webpack_require__.n(injectStylesIntoStyleTag_namespaceFn())); }
;// ./node_modules/style-loader/dist/runtime/styleDomAPI.js
styleDomAPI_namespaceFn();

function styleDomAPI_default() { return styleDomAPI_default.c || (styleDomAPI_default.c = __webpack_require__.n(styleDomAPI_namespaceFn())); }
;// ./node_modules/style-loader/dist/runtime/insertBySelector.js
insertBySelector_namespaceFn();

function insertBySelector_default() { return insertBySelector_default.c || (insertBySelector_default.c = __webpack_require__.n(insertBySelector_namespaceFn())); }
;// ./node_modules/style-loader/dist/runtime/setAttributesWithoutAttributes.js
setAttributesWithoutAttributes_namespaceFn();

function setAttributesWithoutAttributes_default() { return setAttributesWithoutAttributes_default.c || (setAttributesWithoutAttributes_default.c = __webpack_require__.n(setAttributesWithoutAttributes_namespaceFn())); }
;// ./node_modules/style-loader/dist/runtime/insertStyleElement.js
insertStyleElement_namespaceFn();

function insertStyleElement_default() { return insertStyleElement_default.c || (insertStyleElement_default.c = __webpack_require__.n(insertStyleElement_namespaceFn())); }
;// ./node_modules/style-loader/dist/runtime/styleTagTransform.js
styleTagTransform_namespaceFn();

function styleTagTransform_default() { return styleTagTransform_default.c || (styleTagTransform_default.c = __webpack_require__.n(styleTagTransform_namespaceFn())); }
// EXTERNAL MODULE: ./node_modules/css-loader/dist/cjs.js!./style/index.css
var cjs_js_style = __webpack_require__(9);
;// ./style/index.css

      
      
      
      
      
      
      
      
      

var style_options = {};

style_options.styleTagTransform = (styleTagTransform_default()());
style_options.setAttributes = (setAttributesWithoutAttributes_default()());

      style_options.insert = (insertBySelector_default()().bind)(null, "head");
    
style_options.domAPI = (styleDomAPI_default()());
style_options.insertStyleElement = (insertStyleElement_default()());

var style_update = injectStylesIntoStyleTag_default()()(cjs_js_style/* default */.A, style_options);




       /* harmony default export */ const style_0 = (cjs_js_style/* default */.A && cjs_js_style/* default */.A.locals ? cjs_js_style/* default */.A.locals : undefined);

;// ./style/index.js



/***/ }),
/* 9 */
/***/ ((module, __webpack_exports__, __webpack_require__) => {

/* harmony import */ var _node_modules_css_loader_dist_runtime_noSourceMaps_js__WEBPACK_IMPORTED_MODULE_0__ = __webpack_require__(10);
/* harmony import */ var _node_modules_css_loader_dist_runtime_noSourceMaps_js__WEBPACK_IMPORTED_MODULE_0___default = /*#__PURE__*/__webpack_require__.n(_node_modules_css_loader_dist_runtime_noSourceMaps_js__WEBPACK_IMPORTED_MODULE_0__);
/* harmony import */ var _node_modules_css_loader_dist_runtime_api_js__WEBPACK_IMPORTED_MODULE_1__ = __webpack_require__(11);
/* harmony import */ var _node_modules_css_loader_dist_runtime_api_js__WEBPACK_IMPORTED_MODULE_1___default = /*#__PURE__*/__webpack_require__.n(_node_modules_css_loader_dist_runtime_api_js__WEBPACK_IMPORTED_MODULE_1__);
// Imports


var ___CSS_LOADER_EXPORT___ = _node_modules_css_loader_dist_runtime_api_js__WEBPACK_IMPORTED_MODULE_1___default()((_node_modules_css_loader_dist_runtime_noSourceMaps_js__WEBPACK_IMPORTED_MODULE_0___default()));
// Module
___CSS_LOADER_EXPORT___.push([module.id, `/* attnkit's marks beside the code: decorations only (the cell's model is never touched). */
.attnkit-marked.attnkit-full { border-left: 4px solid #2e7d32; }
.attnkit-marked.attnkit-lost { border-left: 4px solid #c62828; }
.attnkit-mark { margin: 2px 0 4px 64px; padding: 4px 8px; font-size: var(--jp-ui-font-size1); border-radius: 3px; }
.attnkit-full > .attnkit-mark { background: #e8f5e9; color: #1b5e20; }
.attnkit-lost > .attnkit-mark { background: #ffebee; color: #8e0000; }
.attnkit-mark-diagnosis { font-weight: bold; margin-top: 2px; }
.attnkit-mark-section { color: var(--jp-ui-font-color2); }
.attnkit-mark-check pre { white-space: pre-wrap; margin: 2px 0; }
.attnkit-attempts { align-self: center; padding: 0 8px; font-size: var(--jp-ui-font-size1); color: var(--jp-ui-font-color1); }
.attnkit-feedback { height: 100%; }
.attnkit-feedback iframe { width: 100%; height: 100%; border: 0; background: white; }
`, ""]);
// Exports
/* harmony default export */ const __WEBPACK_DEFAULT_EXPORT__ = (___CSS_LOADER_EXPORT___);

/* harmony export */ __webpack_require__.d(__webpack_exports__, [
/* harmony export */   "A", 0, __WEBPACK_DEFAULT_EXPORT__
/* harmony export */ ]);


/***/ }),
/* 10 */
/***/ ((module) => {



module.exports = function (i) {
  return i[1];
};

/***/ }),
/* 11 */
/***/ ((module) => {



/*
  MIT License http://www.opensource.org/licenses/mit-license.php
  Author Tobias Koppers @sokra
*/
module.exports = function (cssWithMappingToString) {
  var list = [];

  // return the list of modules as css string
  list.toString = function toString() {
    return this.map(function (item) {
      var content = "";
      var needLayer = typeof item[5] !== "undefined";
      if (item[4]) {
        content += "@supports (".concat(item[4], ") {");
      }
      if (item[2]) {
        content += "@media ".concat(item[2], " {");
      }
      if (needLayer) {
        content += "@layer".concat(item[5].length > 0 ? " ".concat(item[5]) : "", " {");
      }
      content += cssWithMappingToString(item);
      if (needLayer) {
        content += "}";
      }
      if (item[2]) {
        content += "}";
      }
      if (item[4]) {
        content += "}";
      }
      return content;
    }).join("");
  };

  // import a list of modules into the list
  list.i = function i(modules, media, dedupe, supports, layer) {
    if (typeof modules === "string") {
      modules = [[null, modules, undefined]];
    }
    var alreadyImportedModules = {};
    if (dedupe) {
      for (var k = 0; k < this.length; k++) {
        var id = this[k][0];
        if (id != null) {
          alreadyImportedModules[id] = true;
        }
      }
    }
    for (var _k = 0; _k < modules.length; _k++) {
      var item = [].concat(modules[_k]);
      if (dedupe && alreadyImportedModules[item[0]]) {
        continue;
      }
      if (typeof layer !== "undefined") {
        if (typeof item[5] === "undefined") {
          item[5] = layer;
        } else {
          item[1] = "@layer".concat(item[5].length > 0 ? " ".concat(item[5]) : "", " {").concat(item[1], "}");
          item[5] = layer;
        }
      }
      if (media) {
        if (!item[2]) {
          item[2] = media;
        } else {
          item[1] = "@media ".concat(item[2], " {").concat(item[1], "}");
          item[2] = media;
        }
      }
      if (supports) {
        if (!item[4]) {
          item[4] = "".concat(supports);
        } else {
          item[1] = "@supports (".concat(item[4], ") {").concat(item[1], "}");
          item[4] = supports;
        }
      }
      list.push(item);
    }
  };
  return list;
};

/***/ })
]]);