#include "web/assets.h"

#include <span>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace tessera::web {
namespace {

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

TEST(WebAssetsTest, RootServesIndexHtml) {
  const Asset* root = FindAsset("/");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->path, "/index.html");
  EXPECT_EQ(root->content_type, "text/html; charset=utf-8");
  EXPECT_TRUE(Contains(root->body, "<script src=\"/app.js\""));
  EXPECT_TRUE(Contains(root->body, "<link rel=\"stylesheet\" href=\"/app.css\">"));
  EXPECT_EQ(FindAsset("/index.html"), root);
}

// The coordinator's CSP (script-src 'self'; style-src 'self') blocks inline
// code, so the page must carry none.
TEST(WebAssetsTest, IndexHasNoInlineScriptOrStyle) {
  const Asset* index = FindAsset("/index.html");
  ASSERT_NE(index, nullptr);
  EXPECT_FALSE(Contains(index->body, "<style"));
  EXPECT_FALSE(Contains(index->body, "style="));
  EXPECT_FALSE(Contains(index->body, "<script>"));
  EXPECT_FALSE(Contains(index->body, " on"));  // no onload=, onclick=, ...
}

TEST(WebAssetsTest, BundleFilesHaveTheirContentTypes) {
  const Asset* js = FindAsset("/app.js");
  ASSERT_NE(js, nullptr);
  EXPECT_EQ(js->content_type, "text/javascript; charset=utf-8");
  // The bundle carries Chart.js, so it is large; and it never evaluates strings.
  EXPECT_GT(js->body.size(), 50000u);
  EXPECT_TRUE(Contains(js->body, "EventSource"));

  const Asset* css = FindAsset("/app.css");
  ASSERT_NE(css, nullptr);
  EXPECT_EQ(css->content_type, "text/css; charset=utf-8");
  EXPECT_TRUE(Contains(css->body, "prefers-color-scheme"));

  const Asset* icon = FindAsset("/favicon.svg");
  ASSERT_NE(icon, nullptr);
  EXPECT_EQ(icon->content_type, "image/svg+xml");
}

// Bodies are the files' bytes exactly: no terminator added to the view.
TEST(WebAssetsTest, BodiesEndWithTheFilesLastByte) {
  for (std::string_view path : {"/index.html", "/app.js", "/app.css", "/favicon.svg"}) {
    const Asset* a = FindAsset(path);
    ASSERT_NE(a, nullptr) << path;
    ASSERT_FALSE(a->body.empty()) << path;
    EXPECT_NE(a->body.back(), '\0') << path;
  }
  const Asset* index = FindAsset("/index.html");
  EXPECT_EQ(index->body.substr(0, 15), "<!doctype html>");
  EXPECT_EQ(index->body.back(), '\n');
}

TEST(WebAssetsTest, AllAssetsListsEachFileOnceInPathOrder) {
  std::span<const Asset> all = AllAssets();
  ASSERT_GE(all.size(), 4u);  // index.html, app.js, app.css, favicon.svg
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(FindAsset(all[i].path), &all[i]) << all[i].path;
    if (i > 0) EXPECT_LT(all[i - 1].path, all[i].path);
  }
}

TEST(WebAssetsTest, OnlyExactPathsAreFound) {
  for (std::string_view path :
       {"", "app.js", "/app.js/", "/APP.JS", "/app.js?v=1", "/../index.html",
        "/dist/app.js", "/api/v1/jobs", "/jobs", "/index.htm", "//"}) {
    EXPECT_EQ(FindAsset(path), nullptr) << path;
  }
}

}  // namespace
}  // namespace tessera::web
